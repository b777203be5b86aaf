#include "services/frontend/request_validator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/frontend/request_id.h"
#include "services/frontend/test_tokenizer.h"

namespace folio::frontend {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kMaxModelLen = 32;

class RequestValidatorTest : public ::testing::Test {
 protected:
  RequestValidatorTest()
      : tokenizer_(testing::TestTokenizer()), validator_(tokenizer_, Options()) {}

  static ValidatorOptions Options() {
    ValidatorOptions options;
    options.max_model_len = kMaxModelLen;
    options.seed_source = [] { return uint64_t{42}; };
    options.request_id_source = [] { return std::string("generated-id"); };
    return options;
  }

  static GenerateInput Prompt(std::string text) {
    GenerateInput in;
    in.prompt = std::move(text);
    return in;
  }

  Tokenizer tokenizer_;
  RequestValidator validator_;
};

TEST_F(RequestValidatorTest, SpecialTokensInThePromptAreParsedUnlessTurnedOff) {
  // Default: "</s>" written in the prompt is the EOS token (id 2), as in llama.cpp's server.
  absl::StatusOr<ValidatedRequest> parsed = validator_.Validate(Prompt("the cat</s>"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->prompt_token_ids.back(), tokenizer_.eos_id());
  GenerateInput plain = Prompt("the cat</s>");
  plain.parse_special = false;
  absl::StatusOr<ValidatedRequest> text = validator_.Validate(plain);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(std::count(text->prompt_token_ids.begin(), text->prompt_token_ids.end(),
                       tokenizer_.eos_id()),
            0);
  EXPECT_EQ(text->prompt_token_ids, *tokenizer_.Encode("the cat</s>", AddBos::kYes));
  // Invalid UTF-8 names the byte offset.
  absl::StatusOr<ValidatedRequest> bad = validator_.Validate(Prompt("ab\xC3"));
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("byte offset 2"));
}

TEST_F(RequestValidatorTest, AppliesDefaults) {
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(Prompt("the cat"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "generated-id");
  ASSERT_FALSE(r->prompt_token_ids.empty());
  EXPECT_EQ(r->prompt_token_ids.front(), tokenizer_.bos_id());
  EXPECT_EQ(r->prompt_token_ids, *tokenizer_.Encode("the cat", AddBos::kYes));
  EXPECT_EQ(r->max_tokens, 16);
  EXPECT_EQ(r->temperature, 1.0f);
  EXPECT_EQ(r->top_p, 1.0f);
  EXPECT_EQ(r->top_k, 0);
  EXPECT_EQ(r->min_p, 0.0f);
  EXPECT_EQ(r->seed, 42u);
  EXPECT_FALSE(r->logprobs.has_value());
  EXPECT_EQ(r->ignore_eos, IgnoreEos::kNo);
  EXPECT_TRUE(r->stop.empty());
  EXPECT_TRUE(r->stop_token_ids.empty());
}

TEST_F(RequestValidatorTest, KeepsGivenValues) {
  GenerateInput in = Prompt("hello world");
  in.request_id = "client-id-7";
  in.max_tokens = 5;
  in.temperature = 0.0f;
  in.top_p = 0.5f;
  in.top_k = 3;
  in.min_p = 0.25f;
  in.seed = 7;
  in.logprobs = 0;
  in.stop = {"cat", "\n"};
  in.stop_token_ids = {2, 5};
  in.ignore_eos = true;
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "client-id-7");
  EXPECT_EQ(r->max_tokens, 5);
  EXPECT_EQ(r->temperature, 0.0f);
  EXPECT_EQ(r->top_p, 0.5f);
  EXPECT_EQ(r->top_k, 3);
  EXPECT_EQ(r->min_p, 0.25f);
  EXPECT_EQ(r->seed, 7u);
  EXPECT_EQ(r->logprobs, 0);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"cat", "\n"}));
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(r->ignore_eos, IgnoreEos::kYes);
}

TEST_F(RequestValidatorTest, PromptTokenIdsAreUsedAsGiven) {
  GenerateInput in;
  in.prompt_token_ids = {270, 271, 272};
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_token_ids, in.prompt_token_ids);  // no BOS added
}

TEST_F(RequestValidatorTest, EmptyPromptIsJustBos) {
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(Prompt(""));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_token_ids, std::vector<int32_t>{tokenizer_.bos_id()});
}

TEST_F(RequestValidatorTest, EmptyPromptWithoutBosIsRejected) {
  Tokenizer no_bos = testing::TestTokenizer(/*add_bos=*/false);
  RequestValidator validator(no_bos, Options());
  absl::StatusOr<ValidatedRequest> r = validator.Validate(Prompt(""));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("prompt"));
}

TEST_F(RequestValidatorTest, RandomSeedWhenUnset) {
  ValidatorOptions options;
  options.max_model_len = kMaxModelLen;
  RequestValidator validator(tokenizer_, options);
  absl::StatusOr<ValidatedRequest> a = validator.Validate(Prompt("the"));
  absl::StatusOr<ValidatedRequest> b = validator.Validate(Prompt("the"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->seed, b->seed);  // 2^-64 chance of a false failure
  EXPECT_EQ(a->request_id.size(), 32u);
  EXPECT_NE(a->request_id, b->request_id);
}

TEST_F(RequestValidatorTest, LengthLimitNamesBothNumbers) {
  GenerateInput in;
  in.prompt_token_ids = {1, 270, 271};
  in.max_tokens = kMaxModelLen - 3;  // exactly fits
  EXPECT_TRUE(validator_.Validate(in).ok());
  in.max_tokens = kMaxModelLen - 2;
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("3 tokens"));
  EXPECT_THAT(std::string(r.status().message()), ::testing::StartsWith("max_tokens is 30"));
  EXPECT_THAT(r.status().message(), HasSubstr("may be at most 29"));
  EXPECT_THAT(r.status().message(), HasSubstr("max_model_len 32"));
  // A prompt that fills the context alone is the prompt's fault, with both numbers.
  in.prompt_token_ids.assign(kMaxModelLen, 5);
  in.max_tokens = 1;
  r = validator_.Validate(in);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::StartsWith("prompt has 32 tokens"));
  EXPECT_THAT(r.status().message(), HasSubstr("max_model_len) is 32"));
}

TEST_F(RequestValidatorTest, BoundaryValuesAreAccepted) {
  const std::vector<std::function<void(GenerateInput&)>> cases = {
      [](GenerateInput& in) { in.temperature = 0.0f; },
      [](GenerateInput& in) { in.temperature = 2.0f; },
      [](GenerateInput& in) { in.top_p = 1.0f; },
      [](GenerateInput& in) { in.top_p = 1e-6f; },
      [](GenerateInput& in) { in.top_k = 0; },
      [](GenerateInput& in) { in.min_p = 0.0f; },
      [](GenerateInput& in) { in.min_p = 1.0f; },
      [](GenerateInput& in) { in.logprobs = 0; },
      [](GenerateInput& in) { in.logprobs = 20; },
      [](GenerateInput& in) { in.max_tokens = 1; },
      [](GenerateInput& in) { in.stop = std::vector<std::string>(8, "x"); },
      [](GenerateInput& in) { in.stop = {std::string(256, 'x')}; },
      [](GenerateInput& in) { in.stop = {"\u65e5\u672c"}; },
      [](GenerateInput& in) { in.request_id = std::string(128, 'r'); },
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerateInput in = Prompt("the cat");
    cases[i](in);
    absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
    EXPECT_TRUE(r.ok()) << "case " << i << ": " << r.status();
  }
}

struct BadCase {
  const char* name;
  std::function<void(GenerateInput&)> mutate;
  std::vector<std::string> message_parts;  // each must appear in the message
};

TEST_F(RequestValidatorTest, RejectsEveryBadValueNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadCase> cases = {
      {"max_tokens 0", [](GenerateInput& in) { in.max_tokens = 0; }, {"max_tokens", "at least 1"}},
      {"max_tokens negative", [](GenerateInput& in) { in.max_tokens = -5; }, {"max_tokens"}},
      {"too long",
       [](GenerateInput& in) { in.max_tokens = 1000; },
       {"max_tokens is 1000", "max_model_len 32"}},
      {"temperature low",
       [](GenerateInput& in) { in.temperature = -0.1f; },
       {"temperature", "[0, 2]"}},
      {"temperature high",
       [](GenerateInput& in) { in.temperature = 2.5f; },
       {"temperature", "[0, 2]"}},
      {"temperature nan", [nan](GenerateInput& in) { in.temperature = nan; }, {"temperature"}},
      {"top_p zero", [](GenerateInput& in) { in.top_p = 0.0f; }, {"top_p", "(0, 1]"}},
      {"top_p high", [](GenerateInput& in) { in.top_p = 1.5f; }, {"top_p", "(0, 1]"}},
      {"top_p nan", [nan](GenerateInput& in) { in.top_p = nan; }, {"top_p"}},
      {"top_k negative", [](GenerateInput& in) { in.top_k = -1; }, {"top_k", ">= 0"}},
      {"min_p negative", [](GenerateInput& in) { in.min_p = -0.1f; }, {"min_p", "[0, 1]"}},
      {"min_p high", [](GenerateInput& in) { in.min_p = 1.1f; }, {"min_p", "[0, 1]"}},
      {"logprobs negative", [](GenerateInput& in) { in.logprobs = -1; }, {"logprobs", "[0, 20]"}},
      {"logprobs high", [](GenerateInput& in) { in.logprobs = 21; }, {"logprobs", "[0, 20]"}},
      {"prompt bad utf8",
       [](GenerateInput& in) {
         in.prompt =
             "ab\xff"
             "cd";
       },
       {"prompt", "UTF-8", "byte offset 2"}},
      {"prompt truncated utf8",
       [](GenerateInput& in) { in.prompt = "the \xe6\x97"; },
       {"prompt", "byte offset 4"}},
      {"prompt id too big",
       [](GenerateInput& in) {
         in.prompt.clear();
         in.prompt_token_ids = {1, 100000};
       },
       {"prompt_token_ids[1]", "100000", "[0, "}},
      {"prompt id negative",
       [](GenerateInput& in) {
         in.prompt.clear();
         in.prompt_token_ids = {-1};
       },
       {"prompt_token_ids[0]"}},
      {"prompt and ids",
       [](GenerateInput& in) {
         in.prompt_token_ids = {1, 270};
       },
       {"prompt and prompt_token_ids"}},
      {"nine stops",
       [](GenerateInput& in) { in.stop = std::vector<std::string>(9, "x"); },
       {"stop", "at most 8"}},
      {"empty stop",
       [](GenerateInput& in) {
         in.stop = {"ok", ""};
       },
       {"stop[1]", "empty"}},
      {"long stop",
       [](GenerateInput& in) { in.stop = {std::string(257, 'x')}; },
       {"stop[0]", "257", "256"}},
      {"bad utf8 stop", [](GenerateInput& in) { in.stop = {"a\xc3"}; }, {"stop[0]", "UTF-8"}},
      {"stop token id",
       [](GenerateInput& in) {
         in.stop_token_ids = {2, 4096};
       },
       {"stop_token_ids[1]", "4096"}},
      {"long request id",
       [](GenerateInput& in) { in.request_id = std::string(129, 'r'); },
       {"request_id", "128"}},
      {"request id with space",
       [](GenerateInput& in) { in.request_id = "a b"; },
       {"request_id", "offset 1"}},
      {"presence penalty", [](GenerateInput& in) { in.presence_penalty = 2.5f; },
       {"presence_penalty is 2.5", "[-2, 2]"}},
      {"frequency penalty", [](GenerateInput& in) { in.frequency_penalty = -3.0f; },
       {"frequency_penalty is -3", "[-2, 2]"}},
      {"nan penalty", [](GenerateInput& in) { in.frequency_penalty = std::nanf(""); },
       {"frequency_penalty"}},
      {"repetition penalty", [](GenerateInput& in) { in.repetition_penalty = 0.0f; },
       {"repetition_penalty is 0", "> 0"}},
      {"logit_bias key", [](GenerateInput& in) { in.logit_bias = {{1, 1.0f}, {4096, 1.0f}}; },
       {"logit_bias key 4096 is not a token id"}},
      {"logit_bias value", [](GenerateInput& in) { in.logit_bias = {{1, -101.0f}}; },
       {"logit_bias value for token 1", "[-100, 100]"}},
      {"logit_bias size",
       [](GenerateInput& in) {
         for (int32_t t = 0; t < 301; ++t) in.logit_bias.push_back({t, 1.0f});
       },
       {"logit_bias has 301 entries", "300"}},
      {"min_tokens above max_tokens",
       [](GenerateInput& in) {
         in.max_tokens = 4;
         in.min_tokens = 5;
       },
       {"min_tokens is 5", "max_tokens = 4"}},
      {"negative min_tokens", [](GenerateInput& in) { in.min_tokens = -1; }, {"min_tokens is -1"}},
      {"num_speculative_tokens above 16",
       [](GenerateInput& in) { in.num_speculative_tokens = 17; },
       {"num_speculative_tokens is 17", "[0, 16]"}},
      {"negative num_speculative_tokens",
       [](GenerateInput& in) { in.num_speculative_tokens = -1; },
       {"num_speculative_tokens is -1"}},
  };
  for (const BadCase& c : cases) {
    GenerateInput in = Prompt("the cat");
    c.mutate(in);
    absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name << ": " << r.status();
    for (const std::string& part : c.message_parts) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr(part)) << c.name;
    }
  }
}

TEST_F(RequestValidatorTest, PenaltiesLogitBiasAndMinTokens) {
  GenerateInput in = Prompt("the cat");
  absl::StatusOr<ValidatedRequest> r = validator_.Validate(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->presence_penalty, 0.0f);
  EXPECT_EQ(r->frequency_penalty, 0.0f);
  EXPECT_EQ(r->repetition_penalty, 1.0f);
  EXPECT_TRUE(r->logit_bias.empty());
  EXPECT_EQ(r->min_tokens, 0);
  EXPECT_EQ(r->num_speculative_tokens, -1);  // the scheduler's own
  in.presence_penalty = -2.0f;
  in.frequency_penalty = 2.0f;
  in.repetition_penalty = 1.2f;
  in.logit_bias = {{9, 100.0f}, {3, -100.0f}};
  // 300 in all, every one a token of the 306-token test vocabulary.
  for (int32_t t = 0; in.logit_bias.size() < 300; ++t) {
    if (t != 3 && t != 9) in.logit_bias.push_back({t, 0.5f});
  }
  in.max_tokens = 8;
  in.min_tokens = 8;
  r = validator_.Validate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->presence_penalty, -2.0f);
  EXPECT_EQ(r->frequency_penalty, 2.0f);
  EXPECT_EQ(r->repetition_penalty, 1.2f);
  ASSERT_EQ(r->logit_bias.size(), 300u);
  EXPECT_EQ(r->logit_bias[3], (std::pair<int32_t, float>{3, -100.0f})) << "sorted by token";
  EXPECT_TRUE(std::is_sorted(r->logit_bias.begin(), r->logit_bias.end()));
  EXPECT_EQ(r->min_tokens, 8);
}

TEST(RequestValidatorBeamTest, PenaltiesAreRefusedWithBeamSearch) {
  Tokenizer tokenizer = testing::TestTokenizer();
  ValidatorOptions options;
  options.max_model_len = 32;
  options.max_n = 4;
  options.max_beam_width = 4;
  RequestValidator validator(tokenizer, options);
  GenerateInput in;
  in.prompt = "the cat";
  in.beam_width = 2;
  ASSERT_TRUE(validator.Validate(in).ok());
  in.logit_bias = {{5, 1.0f}};
  absl::StatusOr<ValidatedRequest> r = validator.Validate(in);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("logit_bias is not supported with beam search"));
  in.logit_bias.clear();
  in.min_tokens = 2;
  EXPECT_THAT(std::string(validator.Validate(in).status().message()),
              HasSubstr("min_tokens is not supported with beam search"));
}

TEST(RequestIdTest, IsRandomHex) {
  const std::string a = NewRequestId();
  const std::string b = NewRequestId();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(RequestValidatorSharingTest, ChoicesAndBeamWidthWithinTheClusterLimits) {
  const Tokenizer tokenizer = testing::TestTokenizer();
  ValidatorOptions options;
  options.max_model_len = kMaxModelLen;
  options.max_n = 4;
  options.max_beam_width = 3;
  RequestValidator validator(tokenizer, options);
  auto check = [&](std::optional<int32_t> n, std::optional<int32_t> beam,
                   std::optional<float> penalty) {
    GenerateInput in;
    in.prompt = "the cat";
    in.n = n;
    in.beam_width = beam;
    in.length_penalty = penalty;
    return validator.Validate(in);
  };
  absl::StatusOr<ValidatedRequest> ok = check(4, std::nullopt, std::nullopt);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->n, 4);
  EXPECT_EQ(ok->beam_width, 0);
  ok = check(std::nullopt, 3, 0.5f);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->n, 1);
  EXPECT_EQ(ok->beam_width, 3);
  EXPECT_EQ(ok->length_penalty, 0.5f);

  GenerateInput greedy;
  greedy.prompt = "the cat";
  greedy.n = 3;
  greedy.temperature = 0.0f;
  EXPECT_TRUE(validator.Validate(greedy).ok()) << "n > 1 with temperature 0 is allowed";

  struct Bad {
    std::optional<int32_t> n, beam;
    std::optional<float> penalty;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {0, std::nullopt, std::nullopt, "n is 0; it must be in [1, 4]"},
           {5, std::nullopt, std::nullopt, "n is 5; it must be in [1, 4]"},
           {1, 4, std::nullopt, "beam_width is 4; it must be in [0, 3]"},
           {1, -1, std::nullopt, "beam_width is -1"},
           {3, 2, std::nullopt, "n must not exceed it"},
           {1, std::nullopt, 1.0f, "length_penalty applies to beam search only"},
           {1, 2, std::numeric_limits<float>::infinity(), "length_penalty must be a finite"},
       }) {
    absl::StatusOr<ValidatedRequest> r = check(bad.n, bad.beam, bad.penalty);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bad.message));
  }
}

}  // namespace
}  // namespace folio::frontend
