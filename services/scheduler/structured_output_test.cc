// Structured output through the scheduler, the real cache manager and the real CPU model
// (stories260K), in process: every choice's tokens are accepted by the grammar and close it
// ("stop"), the workers get the mask with every sampling step, n > 1 and beam branches
// follow their own state, preemption (recompute) and tensor parallelism leave the streams
// unchanged, max_tokens inside the structure ends with "length".
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/structured/grammar.h"
#include "common/structured/grammar_matcher.h"
#include "common/structured/json_schema.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/scheduler/stories_fixture.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;
using stories::Choices;

const char kSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["name", "age"]})";

class StructuredOutputTest : public stories::StoriesSchedulerTest {
 protected:
  void SetUp() override {
    StoriesSchedulerTest::SetUp();
    if (IsSkipped()) return;
    LoadGrammars();
    grammar_ = *structured::JsonSchemaToGrammar(kSchema, {});
  }

  void MakeStructured(int32_t num_blocks, int32_t tp_size = 1) {
    SchedulerOptions options;
    options.grammars = grammars_;
    Make(num_blocks, tp_size, options);
  }

  RequestSpec Structured(int32_t n, float temperature, int32_t max_tokens = 200) {
    RequestSpec spec = Spec(Prompt(6), max_tokens, temperature);
    spec.n = n;
    spec.grammar = grammar_;
    return spec;
  }

  // Every choice: its tokens replay through the grammar to a closed structure, end with
  // "stop" and decode to JSON that has the required fields.
  void ExpectValid(const Choices& c, int32_t n) {
    ASSERT_EQ(static_cast<int32_t>(c.tokens.size()), n);
    auto compiled = *grammars_->Get(grammar_);
    for (const auto& [index, tokens] : c.tokens) {
      structured::GrammarMatcher m(compiled);
      for (int32_t t : tokens) ASSERT_TRUE(m.AcceptToken(t)) << "choice " << index;
      EXPECT_TRUE(m.IsTerminated()) << "choice " << index;
      EXPECT_EQ(c.finish.at(index), FinishReason::kStop);
      const std::string text = *tokenizer_->Decode(tokens);
      nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << text;
      EXPECT_TRUE(j.contains("name") && j["name"].is_string()) << text;
      EXPECT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
      EXPECT_LE(j["name"].get<std::string>().size(), 8u * 4) << text;
    }
  }

  std::string grammar_;
};

TEST_F(StructuredOutputTest, GreedyAndSampledChoicesCloseTheStructure) {
  MakeStructured(64);
  ExpectValid(Run(Structured(1, 0.0f)), 1);
  const Choices sampled = Run(Structured(4, 1.0f));
  ExpectValid(sampled, 4);
  // The branches follow their own state: the sampled texts are not all one text.
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [i, t] : sampled.tokens) distinct.insert(t);
  EXPECT_GT(distinct.size(), 1u);
  // Every sampling step carried a mask of the whole vocabulary.
  ASSERT_FALSE(worker_->sampled.empty());
  for (const worker::SequenceStep& s : worker_->sampled) {
    EXPECT_EQ(static_cast<int32_t>(s.history.allowed_token_bitmask.size()),
              structured::BitmaskWords(weights_->config.vocab_size));
  }
  EXPECT_EQ(grammars_->misses(), 1);  // compiled once for every request
}

TEST_F(StructuredOutputTest, PreemptionAndRecomputeKeepTheStreams) {
  MakeStructured(64);
  const Choices roomy = Run(Structured(3, 1.0f));
  ExpectValid(roomy, 3);
  // A pool too small for the group next to an earlier request: the group is preempted
  // and recomputed from its prompt and streamed tokens (the matchers stay as they were).
  MakeStructured(30);
  RequestSpec other = Spec(Prompt(200), 150, 1.0f);
  other.ignore_eos = true;
  Choices first, tight;
  ASSERT_TRUE(scheduler_->Submit(other, first.Sink()).ok());
  ASSERT_TRUE(scheduler_->Submit(Structured(3, 1.0f), tight.Sink()).ok());
  RunUntilIdle();
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  ASSERT_TRUE(tight.done);
  EXPECT_EQ(tight.tokens, roomy.tokens);
  EXPECT_EQ(tight.finish, roomy.finish);
}

TEST_F(StructuredOutputTest, TensorParallelGivesTheSameStreams) {
  MakeStructured(64);
  const Choices one = Run(Structured(2, 0.9f));
  MakeStructured(64, /*tp_size=*/2);
  const Choices two = Run(Structured(2, 0.9f));
  EXPECT_EQ(one.tokens, two.tokens);
}

TEST_F(StructuredOutputTest, BeamSearchKeepsEveryBeamInTheGrammar) {
  MakeStructured(128);
  RequestSpec spec = Structured(2, 0.0f);
  spec.beam_width = 3;
  ExpectValid(Run(spec), 2);
}

TEST_F(StructuredOutputTest, MaxTokensInsideTheStructureEndsWithLength) {
  MakeStructured(64);
  const Choices c = Run(Structured(1, 0.0f, /*max_tokens=*/3));
  ASSERT_EQ(c.tokens.at(0).size(), 3u);
  EXPECT_EQ(c.finish.at(0), FinishReason::kLength);
}

// tool_choice "auto": a lazy grammar leaves each choice free until its trigger appears in
// the output (here two bytes straddling a token boundary of a free run), then constrains
// the rest from the trigger's first byte on (the rest of the token that completed it
// included, hence the grammar's letters before the object). Before the trigger the choices are the free
// run's, token for token (same seed, no mask); after it they close the grammar.
TEST_F(StructuredOutputTest, LazyGrammarIsFreeUntilItsTriggerThenConstrains) {
  MakeStructured(64);
  const structured::TokenVocabulary& vocab = *grammars_->vocab();
  RequestSpec free_spec = Spec(Prompt(6), 60, 1.0f);
  free_spec.n = 3;
  const Choices free_run = Run(free_spec);
  auto bytes_of = [&](const std::vector<int32_t>& tokens, size_t count) {
    std::string text;
    for (size_t i = 0; i < count && i < tokens.size(); ++i) text += vocab.bytes(tokens[i]);
    return text;
  };
  // The trigger: the last byte of token k-1 and the first of token k, first seen there.
  const std::vector<int32_t>& t0 = free_run.tokens.at(0);
  std::string trigger;
  for (size_t k = 3; k < t0.size() && trigger.empty(); ++k) {
    const std::string& a = vocab.bytes(t0[k - 1]);
    const std::string& b = vocab.bytes(t0[k]);
    if (a.empty() || b.empty()) continue;
    const std::string cand = std::string(1, a.back()) + b.front();
    if (bytes_of(t0, k + 1).find(cand) == bytes_of(t0, k).size() - 1) trigger = cand;
  }
  ASSERT_FALSE(trigger.empty()) << "no token boundary to trigger on in " << bytes_of(t0, 60);
  const std::string lazy_grammar =
      absl::StrCat("root ::= ", structured::GbnfLiteral(trigger), " [a-z ]{0,16} obj\n",
                   *structured::JsonSchemaToRules(kSchema, "obj", {}));
  RequestSpec lazy = free_spec;
  lazy.max_tokens = 200;
  lazy.grammar = lazy_grammar;
  lazy.grammar_triggers = {{.text = trigger}};
  worker_->sampled.clear();
  const Choices c = Run(lazy);
  auto compiled = *grammars_->Get(lazy_grammar);
  int fired = 0;
  for (const auto& [index, tokens] : c.tokens) {
    SCOPED_TRACE(absl::StrCat("choice ", index, " trigger '", trigger, "'"));
    const std::vector<int32_t>& f = free_run.tokens.at(index);
    // Where the free run's text first holds the trigger: token k completes it.
    size_t k = 0;
    for (; k < f.size(); ++k) {
      if (bytes_of(f, k + 1).find(trigger) != std::string::npos) break;
    }
    if (k == f.size()) {
      // Never triggered within the free run's 60 tokens: as free as it was.
      EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + std::min<size_t>(60, tokens.size())),
                std::vector<int32_t>(f.begin(), f.begin() + std::min<size_t>(60, tokens.size())));
      continue;
    }
    ++fired;
    ASSERT_GT(tokens.size(), k);
    EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + k + 1),
              std::vector<int32_t>(f.begin(), f.begin() + k + 1));
    // From the trigger on, the grammar: the rest of the text closes it.
    const std::string text = bytes_of(tokens, tokens.size());
    const size_t at = text.find(trigger);
    ASSERT_NE(at, std::string::npos) << text;
    structured::GrammarMatcher m(compiled);
    EXPECT_TRUE(m.AcceptBytes(text.substr(at))) << text;
    EXPECT_TRUE(m.IsTerminated()) << text;
    EXPECT_EQ(c.finish.at(index), FinishReason::kStop);
    nlohmann::json j = nlohmann::json::parse(text.substr(text.find('{', at)), nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("name") && j.contains("age")) << text;
  }
  EXPECT_GE(fired, 1);
  // The workers got masks only once a choice had fired: some steps had none.
  int masked = 0;
  for (const worker::SequenceStep& s : worker_->sampled) {
    masked += s.history.allowed_token_bitmask.empty() ? 0 : 1;
  }
  EXPECT_GT(masked, 0);
  EXPECT_LT(masked, static_cast<int>(worker_->sampled.size()));
  // A continuation replays the streamed tokens through the watch and the matcher: choice 0
  // resumed just after its trigger ends as the undisturbed run did.
  const std::vector<int32_t>& done0 = c.tokens.at(0);
  size_t k0 = 0;
  while (k0 < done0.size() && bytes_of(done0, k0 + 1).find(trigger) == std::string::npos) ++k0;
  ASSERT_LT(k0 + 1, done0.size());
  RequestSpec resumed = lazy;
  resumed.n = 1;
  resumed.continuation = {{.index = 0, .tokens = {done0.begin(), done0.begin() + k0 + 2}}};
  const Choices r = Run(resumed);
  std::vector<int32_t> joined(done0.begin(), done0.begin() + k0 + 2);
  joined.insert(joined.end(), r.tokens.at(0).begin(), r.tokens.at(0).end());
  EXPECT_EQ(joined, done0);
  // Triggers without a grammar, and bad triggers, are refused at Submit.
  RequestSpec bare = Spec(Prompt(6), 10);
  bare.grammar_triggers = {{.text = "x"}};
  Choices ignored;
  EXPECT_THAT(scheduler_->Submit(bare, ignored.Sink()).status().message(),
              HasSubstr("grammar_triggers: set without a grammar"));
  RequestSpec bad = lazy;
  bad.grammar_triggers = {{.text = ""}};
  EXPECT_THAT(scheduler_->Submit(bad, ignored.Sink()).status().message(),
              HasSubstr("grammar_triggers[0].text is empty"));
}

TEST_F(StructuredOutputTest, BadGrammarsAreRefusedAtSubmit) {
  MakeStructured(64);
  RequestSpec spec = Structured(1, 0.0f);
  spec.grammar = "root ::= (";
  Choices c;
  absl::StatusOr<uint64_t> handle = scheduler_->Submit(spec, c.Sink());
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(handle.status().message(), HasSubstr("grammar: line 1"));
  // Without a vocabulary the scheduler refuses any grammar.
  Make(64);
  handle = scheduler_->Submit(Structured(1, 0.0f), c.Sink());
  ASSERT_FALSE(handle.ok());
  EXPECT_THAT(handle.status().message(), HasSubstr("no vocabulary"));
}

// A grammar too ambiguous for the matcher (2^k parses after k "a"s; grammar_matcher.h):
// refused at Submit when the compile-time probe reaches it. Behind a prefix wider than the
// probe goes (26 alternatives of 25 bytes: it stops near depth 10) the grammar compiles;
// with "a" pushed up, the model walks into the ambiguity and the request ends with the
// error at the mask that goes over, rather than stalling the loop.
TEST_F(StructuredOutputTest, TooAmbiguousGrammarsAreRefused) {
  MakeStructured(64);
  const std::string r = "r ::= \"a\" r \"b\" | \"a\" r \"c\" | \"a\"\n";
  RequestSpec spec = Structured(1, 0.0f);
  spec.grammar = r + "root ::= r";
  Choices c;
  absl::StatusOr<uint64_t> handle = scheduler_->Submit(spec, c.Sink());
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(handle.status().message(), HasSubstr("grammar too ambiguous"));

  std::string prefix = "p ::=";
  for (char ch = 'a'; ch <= 'z'; ++ch) {
    absl::StrAppend(&prefix, ch == 'a' ? " \"" : " | \"", std::string(1, ch), "\"{25}");
  }
  spec.grammar = r + prefix + "\nroot ::= p r";
  const structured::TokenVocabulary& vocab = *grammars_->vocab();
  int32_t a = -1;
  for (int32_t id = 0; id < vocab.size() && a < 0; ++id) {
    if (vocab.bytes(id) == "a") a = id;
  }
  ASSERT_GE(a, 0);
  spec.sampling.logit_bias = {{a, 100.0f}};
  RequestEvent last;
  int32_t tokens = 0;
  handle = scheduler_->Submit(spec, [&](const RequestEvent& e) {
    tokens += static_cast<int32_t>(e.tokens.size());
    if (e.request_done) last = e;
  });
  ASSERT_TRUE(handle.ok()) << handle.status();
  RunUntilIdle();
  ASSERT_TRUE(last.request_done);
  EXPECT_EQ(last.finish, FinishReason::kError);
  EXPECT_EQ(last.error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(last.error.message(), HasSubstr("grammar too ambiguous"));
  EXPECT_GE(tokens, 25);  // through the prefix first
}

}  // namespace
}  // namespace folio::scheduler
