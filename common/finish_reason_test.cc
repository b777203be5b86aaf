#include "common/finish_reason.h"

#include "gtest/gtest.h"

namespace folio {
namespace {

TEST(FinishReasonNameTest, NamesEveryReason) {
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_LENGTH), "length");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_STOP), "stop");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_CANCELLED), "cancelled");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_TOOL_CALLS), "tool_calls");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_UNSPECIFIED), "unspecified");
}

TEST(FinishReasonNameTest, AnUnknownValueIsUnspecified) {
  EXPECT_EQ(FinishReasonName(static_cast<v1::FinishReason>(42)), "unspecified");
}

}  // namespace
}  // namespace folio
