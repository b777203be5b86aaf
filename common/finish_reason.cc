#include "common/finish_reason.h"

namespace folio {

std::string FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "unspecified";
  }
}

}  // namespace folio
