// Tool calling on the gRPC API (GenerateRequest.tool_calling) against the FakeScheduler
// playing a model's output (FrontendTestEnv): the calls come back parsed, streamed as
// ToolCall deltas and whole in Complete, with TOOL_CALLS as the finish reason; the
// scheduler gets the grammar tool_choice implies (auto: the lazy one with its triggers);
// bad tool_calling is INVALID_ARGUMENT naming the field, and nothing reaches the scheduler.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"

namespace folio::frontend::testing {
namespace {

namespace ipb = folio::internal::v1;
namespace pb = folio::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kHermesOutput[] =
    "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>";
constexpr char kTwoCalls[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

class ToolCallingGrpcTest : public FrontendTestEnv {
 protected:
  pb::GenerateRequest ToolRequest(pb::ToolChoice choice = pb::TOOL_CHOICE_AUTO) {
    pb::GenerateRequest request = Request("What is the weather in Paris?", 200);
    pb::ToolCalling* t = request.mutable_tool_calling();
    t->set_format("hermes");
    t->set_tool_choice(choice);
    pb::Tool* weather = t->add_tools();
    weather->set_name("get_weather");
    weather->set_description("The weather in a city");
    weather->set_parameters_json(
        R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
    t->add_tools()->set_name("get_time");  // no parameters: any object
    return request;
  }
  // The last request the scheduler got.
  ipb::ScheduleRequest Sent() { return fake_->calls().back().request; }
};

TEST_F(ToolCallingGrpcTest, CompleteAndGenerateReturnTheParsedCalls) {
  fake_->SetScript(TokensScript(Encode(kHermesOutput), ipb::FINISH_REASON_STOP, 7));
  const std::string said = Decode(Encode(kHermesOutput));
  const std::string content = said.substr(0, said.find("\n<tool_call>"));

  pb::CompleteResponse complete;
  ASSERT_TRUE(Complete(ToolRequest(), &complete).ok());
  EXPECT_EQ(complete.text(), content);
  EXPECT_EQ(complete.finish_reason(), pb::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(complete.tool_calls_size(), 1) << complete.DebugString();
  EXPECT_EQ(complete.tool_calls(0).index(), 0);
  EXPECT_THAT(complete.tool_calls(0).id(), StartsWith("call_"));
  EXPECT_EQ(complete.tool_calls(0).name(), "get_weather");
  EXPECT_EQ(nlohmann::json::parse(complete.tool_calls(0).arguments()),
            nlohmann::json({{"city", "Paris"}}));
  ASSERT_EQ(complete.choices_size(), 1);
  EXPECT_EQ(complete.choices(0).tool_calls(0).DebugString(), complete.tool_calls(0).DebugString());
  // auto: the scheduler got the calls grammar, lazy, triggered by <tool_call>.
  ASSERT_TRUE(fake_->WaitForDoneCalls(1, absl::Seconds(10)));
  EXPECT_THAT(Sent().grammar(), HasSubstr("get_weather"));
  ASSERT_EQ(Sent().grammar_triggers_size(), 1);
  EXPECT_EQ(Sent().grammar_triggers(0).text(), "<tool_call>");

  // Streamed: content deltas, then the call's first delta (index, id, name) and its
  // arguments in fragments as the tokens come.
  StreamResult r = Generate(ToolRequest());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, content);
  std::string arguments;
  int first_deltas = 0, argument_deltas = 0;
  for (const pb::GenerateResponse& m : r.messages) {
    for (const pb::ToolCall& c : m.tool_calls()) {
      EXPECT_EQ(c.index(), 0);
      if (!c.name().empty()) {
        ++first_deltas;
        EXPECT_EQ(c.name(), "get_weather");
        EXPECT_EQ(c.id().size(), 29u);  // call_ + 24
      } else {
        EXPECT_TRUE(c.id().empty());
        ++argument_deltas;
      }
      arguments += c.arguments();
    }
  }
  EXPECT_EQ(first_deltas, 1);
  EXPECT_GT(argument_deltas, 3);
  EXPECT_EQ(arguments, complete.tool_calls(0).arguments());
  EXPECT_EQ(r.messages.back().finish_reason(), pb::FINISH_REASON_TOOL_CALLS);
}

TEST_F(ToolCallingGrpcTest, ToolChoiceModesAndParallelCalls) {
  fake_->SetScript(TokensScript(Encode(kTwoCalls), ipb::FINISH_REASON_STOP, 7));
  pb::CompleteResponse complete;
  ASSERT_TRUE(Complete(ToolRequest(), &complete).ok());
  ASSERT_EQ(complete.tool_calls_size(), 2) << complete.DebugString();
  EXPECT_EQ(complete.tool_calls(1).name(), "get_time");
  EXPECT_EQ(complete.tool_calls(1).arguments(), "{}");
  EXPECT_NE(complete.tool_calls(0).id(), complete.tool_calls(1).id());
  EXPECT_TRUE(complete.text().empty());

  pb::GenerateRequest one = ToolRequest();
  one.mutable_tool_calling()->set_parallel_tool_calls(false);
  ASSERT_TRUE(Complete(one, &complete).ok());
  EXPECT_EQ(complete.tool_calls_size(), 1);

  // required: the calls grammar from the first byte on (no triggers); a function: its own.
  ASSERT_TRUE(Complete(ToolRequest(pb::TOOL_CHOICE_REQUIRED), &complete).ok());
  ASSERT_TRUE(fake_->WaitForDoneCalls(3, absl::Seconds(10)));
  EXPECT_THAT(Sent().grammar(), HasSubstr("get_time"));
  EXPECT_EQ(Sent().grammar_triggers_size(), 0);
  pb::GenerateRequest named = ToolRequest(pb::TOOL_CHOICE_FUNCTION);
  named.mutable_tool_calling()->set_function("get_time");
  ASSERT_TRUE(Complete(named, &complete).ok());
  ASSERT_TRUE(fake_->WaitForDoneCalls(4, absl::Seconds(10)));
  EXPECT_THAT(Sent().grammar(), HasSubstr("get_time"));
  EXPECT_THAT(Sent().grammar(), ::testing::Not(HasSubstr("get_weather")));

  // none: no grammar, no parsing; the text as the model wrote it.
  ASSERT_TRUE(Complete(ToolRequest(pb::TOOL_CHOICE_NONE), &complete).ok());
  EXPECT_EQ(complete.text(), Decode(Encode(kTwoCalls)));
  EXPECT_EQ(complete.tool_calls_size(), 0);
  EXPECT_EQ(complete.finish_reason(), pb::FINISH_REASON_STOP);
  ASSERT_TRUE(fake_->WaitForDoneCalls(5, absl::Seconds(10)));
  EXPECT_EQ(Sent().grammar(), "");
  // auto with structured output of its own: that constrains, the calls are still parsed.
  pb::GenerateRequest structured = ToolRequest();
  structured.mutable_sampling()->mutable_structured()->set_regex("[a-z<>]+");
  ASSERT_TRUE(Complete(structured, &complete).ok());
  EXPECT_EQ(complete.tool_calls_size(), 2);
  ASSERT_TRUE(fake_->WaitForDoneCalls(6, absl::Seconds(10)));
  EXPECT_EQ(Sent().grammar_triggers_size(), 0);
  EXPECT_THAT(Sent().grammar(), ::testing::Not(HasSubstr("get_time")));
}

TEST_F(ToolCallingGrpcTest, BadToolCallingIsInvalidArgumentNamingTheField) {
  fake_->SetScript(TokensScript(Encode("ok"), ipb::FINISH_REASON_STOP, 3));
  struct Case {
    std::function<void(pb::GenerateRequest*)> edit;
    const char* message;
  };
  const Case cases[] = {
      {[](pb::GenerateRequest* r) { r->mutable_tool_calling()->clear_format(); },
       "tool_calling.format is required with tools"},
      {[](pb::GenerateRequest* r) { r->mutable_tool_calling()->set_format("xml"); },
       "tool_calling.format: "},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->mutable_tools(0)->set_parameters_json("{not json");
       },
       "tool_calling.tools[0].parameters_json must be a JSON object"},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->mutable_tools(1)->set_parameters_json(
             R"({"type": "object", "not": {}})");
       },
       "tool_calling.tools[1].parameters_json: "},
      {[](pb::GenerateRequest* r) { r->mutable_tool_calling()->mutable_tools(1)->set_name(""); },
       "tool_calling.tools[1].name must have 1 to 64 bytes"},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->mutable_tools(1)->set_name("get_weather");
       },
       "tool_calling.tools[1].name 'get_weather' is given twice"},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->set_tool_choice(pb::TOOL_CHOICE_FUNCTION);
         r->mutable_tool_calling()->set_function("get_news");
       },
       "tool_calling.function 'get_news' (TOOL_CHOICE_FUNCTION) is not one of the tools"},
      {[](pb::GenerateRequest* r) { r->mutable_tool_calling()->set_function("get_time"); },
       "tool_calling.function is only for tool_choice TOOL_CHOICE_FUNCTION"},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->clear_tools();
         r->mutable_tool_calling()->set_tool_choice(pb::TOOL_CHOICE_REQUIRED);
       },
       "tool_calling.tool_choice, function, parallel_tool_calls and format need tools"},
      {[](pb::GenerateRequest* r) {
         r->mutable_tool_calling()->set_tool_choice(pb::TOOL_CHOICE_REQUIRED);
         r->mutable_sampling()->mutable_structured()->set_json_object(true);
       },
       "sampling.structured both constrain the output"},
  };
  for (const Case& c : cases) {
    pb::GenerateRequest request = ToolRequest();
    c.edit(&request);
    SCOPED_TRACE(request.tool_calling().DebugString());
    pb::CompleteResponse complete;
    const grpc::Status status = Complete(request, &complete);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    const StreamResult r = Generate(request);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_TRUE(fake_->calls().empty());
}

}  // namespace
}  // namespace folio::frontend::testing
