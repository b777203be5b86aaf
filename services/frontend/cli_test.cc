// folio-cli against a FrontendService (over a FakeScheduler): every command, --json output,
// and the exit codes. Needs the built folio-cli ($FOLIO_BUILD_DIR/bin, set by ctest).
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"
#include "tests/service_process.h"

namespace folio::frontend::testing {
namespace {

namespace ipb = folio::internal::v1;
using nlohmann::json;
using ::testing::HasSubstr;

class CliTest : public FrontendTestEnv {
 protected:
  void SetUp() override {
    FrontendTestEnv::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (std::getenv("FOLIO_BUILD_DIR") == nullptr) {
      GTEST_SKIP() << "FOLIO_BUILD_DIR is not set; run through ctest or set it to the build "
                      "folder holding bin/folio-cli";
    }
  }

  // Runs folio-cli with `args` against the test frontend; stderr is merged into output.
  folio::testing::CommandResult Cli(const std::string& args) {
    return folio::testing::RunCommand(absl::StrCat(folio::testing::BinDir(), "/folio-cli ", args,
                                                   " --server=", address(), " --timeout_s=20"));
  }
};

TEST_F(CliTest, GenerateStreamsText) {
  const std::vector<int32_t> tokens = Encode("there was a cat");
  fake_->SetScript(TokensScript(tokens, ipb::FINISH_REASON_LENGTH, 5));
  folio::testing::CommandResult r = Cli("generate 'Once upon a time' --max_tokens=4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, Decode(tokens) + "\n");
}

TEST_F(CliTest, GenerateJsonHasTheWholeCompletion) {
  const std::vector<int32_t> tokens = Encode("there was a cat");
  for (const char* mode : {"", " --unary"}) {
    fake_->SetScript(TokensScript(tokens, ipb::FINISH_REASON_LENGTH, 5, 1));
    folio::testing::CommandResult r = Cli(absl::StrCat(
        "generate 'Once upon a time' --json --request_id=cli-1 --seed=9 --top_k=3", mode));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json j = json::parse(r.output);
    EXPECT_EQ(j["text"], Decode(tokens)) << mode;
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), tokens);
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(j["usage"]["completion_tokens"], static_cast<int>(tokens.size()));
    EXPECT_EQ(j["usage"]["cached_prompt_tokens"], 1);
    EXPECT_EQ(j["request_id"], "cli-1");
  }
  ASSERT_TRUE(fake_->WaitForDoneCalls(2, absl::Seconds(5)));
  const ipb::ScheduleRequest sent = fake_->calls()[0].request;
  EXPECT_EQ(sent.sampling().seed(), 9u);
  EXPECT_EQ(sent.sampling().top_k(), 3);
  EXPECT_EQ(sent.max_tokens(), 100);
}

TEST_F(CliTest, GenerateWithStopStrings) {
  fake_->SetScript(TokensScript(Encode("there was a cat. The end"), ipb::FINISH_REASON_LENGTH, 5));
  folio::testing::CommandResult r = Cli("generate 'Once upon a time' --stop=. --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output);
  EXPECT_EQ(j["text"], " there was a cat");
  EXPECT_EQ(j["finish_reason"], "stop");
}

TEST_F(CliTest, ErrorsGoToStderrWithTheCode) {
  folio::testing::CommandResult r = Cli("generate 'Once upon a time' --temperature=5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.output, HasSubstr("temperature"));

  folio::testing::CommandResult usage = Cli("frobnicate");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.output, HasSubstr("unknown command"));
}

TEST_F(CliTest, TokenizeModelAndHealth) {
  folio::testing::CommandResult tok = Cli("tokenize 'Once upon a time' --json");
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  EXPECT_EQ(json::parse(tok.output)["token_ids"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));

  folio::testing::CommandResult plain = Cli("tokenize 'Once upon a time'");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("1\t<s>\n"));

  folio::testing::CommandResult model = Cli("model --json");
  ASSERT_EQ(model.exit_code, 0) << model.output;
  const json m = json::parse(model.output);
  EXPECT_EQ(m["name"], "stories260K");
  EXPECT_EQ(m["max_model_len"], 512);

  folio::testing::CommandResult health = Cli("health");
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_EQ(health.output, "SERVING\n");

  runner_->SetServing(ServingState::kNotServing);
  folio::testing::CommandResult down = Cli("health");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_EQ(down.output, "NOT_SERVING\n");
}

TEST_F(CliTest, TokenizeTakesAnExplicitAddBosAndRefusesAnythingElse) {
  folio::testing::CommandResult tok = Cli("tokenize 'Once upon a time' --json --add_bos=false");
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  EXPECT_EQ(json::parse(tok.output)["token_ids"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{403, 407, 261, 378}));
  folio::testing::CommandResult bad = Cli("tokenize 'Once' --add_bos=maybe");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--add_bos must be true or false"));
}

// A frontend with API keys: folio-cli authenticates with --api_key or $FOLIO_API_KEY.
class KeyedCliTest : public CliTest {
 protected:
  KeyedCliTest() { frontend_options_.api_keys = *ApiKeys::Create({"sekret"}, ""); }
};

TEST_F(KeyedCliTest, TheKeyComesFromTheFlagOrTheEnvironment) {
  folio::testing::CommandResult none = Cli("tokenize 'Once'");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.output, HasSubstr("UNAUTHENTICATED"));
  folio::testing::CommandResult flag = Cli("tokenize 'Once' --api_key=sekret");
  EXPECT_EQ(flag.exit_code, 0) << flag.output;
  folio::testing::CommandResult env = folio::testing::RunCommand(absl::StrCat(
      "FOLIO_API_KEY=sekret ", folio::testing::BinDir(), "/folio-cli tokenize Once --server=",
      address(), " --timeout_s=20"));
  EXPECT_EQ(env.exit_code, 0) << env.output;
  folio::testing::CommandResult wrong = Cli("tokenize 'Once' --api_key=nope");
  EXPECT_EQ(wrong.exit_code, 1);
}

TEST_F(CliTest, HelpExplainsEveryCommand) {
  folio::testing::CommandResult r =
      folio::testing::RunCommand(folio::testing::BinDir() + "/folio-cli --help");
  for (const char* word : {"generate", "tokenize", "model", "health", "--server", "--json",
                           "--max_tokens", "--stop"}) {
    EXPECT_THAT(r.output, HasSubstr(word));
  }
}

}  // namespace
}  // namespace folio::frontend::testing
