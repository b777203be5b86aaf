// The name of a folio.v1.FinishReason as the clients print it ("length", "stop",
// "cancelled"; "unspecified" for FINISH_REASON_UNSPECIFIED and values this build does not
// know). The one place that maps them for folio-cli and folio-bench. Thread-safe.
#ifndef FOLIO_COMMON_FINISH_REASON_H_
#define FOLIO_COMMON_FINISH_REASON_H_

#include <string>

#include "folio/v1/folio.pb.h"

namespace folio {

std::string FinishReasonName(v1::FinishReason reason);

}  // namespace folio

#endif  // FOLIO_COMMON_FINISH_REASON_H_
