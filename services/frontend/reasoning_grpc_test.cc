// Reasoning on the gRPC API (GenerateRequest.reasoning_parser) against the FakeScheduler
// playing a reasoning model's output (FrontendTestEnv): the <think> block comes back apart
// from the answer, streamed (GenerateResponse.reasoning) and whole (CompleteResponse and
// its choices), with its tokens in the usage; the prompt's end decides where the output
// starts; a constraint holds only the text after </think>; bad names are
// INVALID_ARGUMENT naming the field.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/frontend/frontend_test_env.h"

namespace folio::frontend::testing {
namespace {

namespace ipb = folio::internal::v1;
namespace pb = folio::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class ReasoningGrpcTest : public FrontendTestEnv {
 protected:
  // The model writes `output`, one token per event.
  void Play(const std::string& output) {
    fake_->SetScript(TokensScript(Encode(output), ipb::FINISH_REASON_STOP, 7));
  }
  static pb::GenerateRequest Thinking(const std::string& prompt) {
    pb::GenerateRequest request = Request(prompt, 200);
    request.set_reasoning_parser("think");
    return request;
  }
  ipb::ScheduleRequest Sent() { return fake_->calls().back().request; }
};

TEST_F(ReasoningGrpcTest, TheReasoningComesBackApartStreamedAndWhole) {
  const std::string output = "<think>\nTwo and two.\n</think>\n\nFour.";
  Play(output);
  const std::string said = Decode(Encode(output));
  const size_t open = said.find("<think>") + 7, close = said.find("</think>");
  const std::string reasoning = said.substr(open, close - open);
  const std::string answer = said.substr(said.find_first_not_of(" \n", close + 8));

  pb::CompleteResponse complete;
  ASSERT_TRUE(Complete(Thinking("User: 2+2?\nAssistant:"), &complete).ok());
  EXPECT_EQ(complete.reasoning(), reasoning);
  EXPECT_EQ(complete.text(), answer);
  ASSERT_EQ(complete.choices_size(), 1);
  EXPECT_EQ(complete.choices(0).reasoning(), reasoning);
  // The tokens through the one that completes </think>.
  const std::vector<int32_t> ids = Encode(output);
  int32_t through_end = 0;
  for (size_t i = 1; i <= ids.size() && through_end == 0; ++i) {
    if (Decode(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(i)))
            .find("</think>") != std::string::npos) {
      through_end = static_cast<int32_t>(i);
    }
  }
  EXPECT_EQ(complete.usage().reasoning_tokens(), through_end);
  EXPECT_EQ(complete.usage().completion_tokens(), static_cast<int32_t>(ids.size()));

  StreamResult r = Generate(Thinking("User: 2+2?\nAssistant:"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  std::string streamed_reasoning;
  int reasoning_messages = 0;
  for (const pb::GenerateResponse& m : r.messages) {
    streamed_reasoning += m.reasoning();
    reasoning_messages += m.reasoning().empty() ? 0 : 1;
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_GT(reasoning_messages, 1);  // as it comes, not at the end
  EXPECT_EQ(r.text, answer);

  // Without the parser the text is raw.
  pb::CompleteResponse raw;
  ASSERT_TRUE(Complete(Request("User: 2+2?\nAssistant:", 200), &raw).ok());
  EXPECT_EQ(raw.text(), said);
  EXPECT_EQ(raw.reasoning(), "");
  EXPECT_EQ(raw.usage().reasoning_tokens(), 0);
}

TEST_F(ReasoningGrpcTest, APromptEndingInThinkStartsTheOutputInside) {
  Play("Two and two.</think>Four.");
  pb::CompleteResponse complete;
  ASSERT_TRUE(Complete(Thinking("User: 2+2?\nAssistant: <think>\n"), &complete).ok());
  EXPECT_THAT(complete.reasoning(), HasSubstr("Two and two."));
  EXPECT_EQ(complete.text(), "Four.");
}

TEST_F(ReasoningGrpcTest, AConstraintHoldsTheTextAfterTheReasoning) {
  Play("{}");
  pb::GenerateRequest request = Thinking("User: JSON please.\nAssistant: <think>\n");
  request.mutable_sampling()->mutable_structured()->set_json_object(true);
  pb::CompleteResponse complete;
  ASSERT_TRUE(Complete(request, &complete).ok());
  ASSERT_TRUE(fake_->WaitForDoneCalls(1, absl::Seconds(10)));
  EXPECT_THAT(Sent().grammar(), StartsWith("root ::= reasoning-think-0 "));
}

TEST_F(ReasoningGrpcTest, BadParserNamesAreInvalidArgument) {
  for (const char* name : {"granite", "auto"}) {
    pb::GenerateRequest request = Request("x", 4);
    request.set_reasoning_parser(name);
    pb::CompleteResponse complete;
    grpc::Status s = Complete(request, &complete);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("reasoning_parser")) << name;
  }
  EXPECT_TRUE(fake_->calls().empty());
}

}  // namespace
}  // namespace folio::frontend::testing
