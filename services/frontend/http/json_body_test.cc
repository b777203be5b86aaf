// Numbers in request bodies: overflowing, fractional where an integer is meant, or out of
// range are InvalidArgument (HTTP 400) naming the field, never an exception or a 500.
#include "services/frontend/http/json_body.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/frontend/http/openai_json.h"

namespace folio::frontend::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(JsonBodyTest, AnOverflowingNumberNamesItsPath) {
  struct Case {
    std::string body;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"max_tokens": 1e309})", "max_tokens"},
           {R"({"a": {"b": [1, 2, -1e400]}})", "a.b[2]"},
           {R"({"messages": [{"role": "user"}, {"content": 9e999}]})", "messages[1].content"},
           {R"([1, [2, 3e500]])", "[1][1]"},
       }) {
    absl::StatusOr<nlohmann::json> j = ParseJsonBody(c.body);
    ASSERT_FALSE(j.ok()) << c.body;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(j.status().message()), StartsWith(c.field + " is out of range")) << c.body;
  }
  ASSERT_TRUE(ParseJsonBody(R"({"x": 1e308, "y": [1.5, -2]})").ok());
  EXPECT_THAT(std::string(ParseJsonBody("{\"x\": ").status().message()), HasSubstr("not valid JSON"));
  EXPECT_THAT(std::string(ParseJsonBody("").status().message()), HasSubstr("not valid JSON"));
}

TEST(JsonBodyTest, RequestNumbersAreCheckedAsTheirFieldsNeed) {
  struct Case {
    std::string body;
    std::string param;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": "x", "max_tokens": 1e309})", "max_tokens", "out of range"},
           {R"({"prompt": "x", "max_tokens": 4.5})", "max_tokens", "an integer, not 4.5"},
           {R"({"prompt": "x", "max_tokens": 4.0})", "max_tokens", "an integer"},
           {R"({"prompt": "x", "max_tokens": 1e30})", "max_tokens", "64-bit range"},
           {R"({"prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens", "range"},
           {R"({"prompt": "x", "max_tokens": 3000000000})", "max_tokens", "32-bit range"},
           {R"({"prompt": "x", "temperature": 1e39})", "temperature", "does not fit a float"},
           {R"({"prompt": "x", "top_p": -1e300})", "top_p", "out of range"},
           {R"({"prompt": "x", "seed": 1.5})", "seed", "an integer"},
           {R"({"prompt": [1, 2.5]})", "prompt", "prompt[1] must be an integer"},
           {R"({"prompt": "x", "n": 1e400})", "n", "out of range"},
       }) {
    absl::StatusOr<Request> r = ParseRequest(Endpoint::kCompletions, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    const HttpError e = ErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.body["error"]["param"], c.param) << c.body << " " << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.body;
  }
  absl::StatusOr<Request> chat = ParseRequest(
      Endpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1e309})");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(ErrorFromStatus(chat.status()).body["error"]["param"], "max_completion_tokens");
}

}  // namespace
}  // namespace folio::frontend::openai
