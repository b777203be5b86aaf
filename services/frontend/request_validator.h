// RequestValidator: turns a public generation request (folio.v1.GenerateRequest, already
// copied into the native GenerateInput by the service layer) into a ValidatedRequest the
// scheduler can run: prompt tokenized, defaults applied, every value checked.
//
// Defaults: max_tokens 16, temperature 1.0, top_p 1.0, top_k 0 (off), min_p 0 (off),
// seed random, logprobs unset (none), ignore_eos false, n 1, beam_width 0 (sampling),
// length_penalty 1.0, presence/frequency penalty 0, repetition_penalty 1, no logit_bias,
// min_tokens 0. Every out-of-range or
// contradictory value is InvalidArgument with a message that names the field and the
// allowed range (see Validate for the list).
//
// Holds a reference to the Tokenizer, which must outlive it. Thread-safe (const after
// construction; the seed source is called under a lock).
#ifndef FOLIO_SERVICES_FRONTEND_REQUEST_VALIDATOR_H_
#define FOLIO_SERVICES_FRONTEND_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/structured/grammar_trigger.h"
#include "common/structured/structured_output.h"
#include "common/tokenizer/tokenizer.h"

namespace folio::frontend {

// The public request as the client sent it; unset optional fields are std::nullopt.
struct GenerateInput {
  std::string request_id;  // empty: one is generated
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  std::optional<int32_t> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::optional<int32_t> logprobs;
  // The request's own name for `logprobs`, for messages: the chat API calls it
  // top_logprobs.
  const char* logprobs_field = "logprobs";
  bool ignore_eos = false;
  std::optional<int32_t> n;
  std::optional<int32_t> beam_width;
  std::optional<float> length_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<float> repetition_penalty;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, bias
  std::optional<int32_t> min_tokens;
  std::optional<int32_t> num_speculative_tokens;  // speculative decoding's k; 0: off
  // Structured output (common/structured/structured_output.h); kind kNone: free text.
  structured::StructuredOutput structured;
  // With triggers the structured grammar is lazy (common/structured/grammar_trigger.h):
  // tool_choice "auto"'s call grammar, from the model's opening marker on.
  std::vector<structured::GrammarTrigger> grammar_triggers;
  // Whether special tokens written in the prompt are read as tokens; unset: yes.
  std::optional<bool> parse_special;
};

// Whether the scheduler keeps generating past the end-of-sequence token.
enum class IgnoreEos { kNo, kYes };

// A request that passed validation, with every default filled in.
struct ValidatedRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;  // never empty
  int32_t max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;        // each non-empty, valid UTF-8
  std::vector<int32_t> stop_token_ids;  // each in the vocabulary
  // Alternatives to report per token; std::nullopt: no log-probs at all (0 reports the
  // sampled token's log-prob only).
  std::optional<int32_t> logprobs;
  IgnoreEos ignore_eos = IgnoreEos::kNo;
  int32_t n = 1;               // choices
  int32_t beam_width = 0;      // 0: sampling
  float length_penalty = 1.0f; // beam search
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // ascending token ids
  int32_t min_tokens = 0;
  int32_t num_speculative_tokens = -1;  // -1: the scheduler's own
  // Structured output compiled to GBNF text (checked: it parses); empty: free text.
  std::string grammar;
  std::vector<structured::GrammarTrigger> grammar_triggers;  // lazy grammar (nonempty grammar)
};

struct ValidatorOptions {
  int32_t max_model_len = 0;            // prompt plus output, in tokens; required (> 0)
  int32_t max_stop_strings = 8;         // how many stop strings a request may give
  int32_t max_stop_string_bytes = 256;  // how long each may be
  int32_t max_logprobs = 20;            // top alternatives per token, at most
  int32_t max_request_id_bytes = 128;   // a client-given request id, at most
  int32_t max_n = 1;                    // choices per request (the cluster's limit)
  int32_t max_beam_width = 0;           // beam width (the cluster's limit; 0: no beam search)
  // Seed for requests that give none. Null: a random 64-bit value.
  std::function<uint64_t()> seed_source;
  // Request id for requests that give none. Null: NewRequestId().
  std::function<std::string()> request_id_source;
};

class RequestValidator {
 public:
  // `tokenizer` must outlive the validator. CHECK-fails when max_model_len <= 0.
  RequestValidator(const Tokenizer& tokenizer, ValidatorOptions options);

  // Validates `input` and fills defaults. InvalidArgument (naming the field) when:
  //   - both prompt and prompt_token_ids are set;
  //   - prompt is not valid UTF-8 (names the byte offset);
  //   - a prompt_token_ids entry is outside [0, vocab_size);
  //   - the prompt is empty and the model adds no BOS (nothing to start from);
  //   - max_tokens < 1, or prompt tokens + max_tokens > max_model_len (names both);
  //   - temperature outside [0, 2], top_p outside (0, 1], top_k < 0, min_p outside [0, 1];
  //   - logprobs outside [0, max_logprobs];
  //   - n outside [1, max_n]; beam_width outside [0, max_beam_width]; n > beam_width in
  //     beam search; length_penalty not finite or without beam search. n > 1 with
  //     temperature 0 is allowed (n identical greedy texts);
  //   - more than max_stop_strings stop strings, or one that is empty, longer than
  //     max_stop_string_bytes or not valid UTF-8;
  //   - a stop_token_ids entry outside [0, vocab_size);
  //   - request_id longer than max_request_id_bytes or with non-printable characters;
  //   - presence_penalty or frequency_penalty outside [-2, 2], repetition_penalty not > 0,
  //     logit_bias with more than 300 entries, a key outside [0, vocab_size) or a bias
  //     outside [-100, 100]; min_tokens outside [0, max_tokens]; any of these with beam
  //     search;
  //   - a structured-output constraint that does not compile (a JSON schema that is not
  //     JSON or uses an unsupported keyword, a regex or grammar that does not parse): the
  //     message opens with "response_format", "regex" or "grammar" and names the problem.
  absl::StatusOr<ValidatedRequest> Validate(const GenerateInput& input) const;

  int32_t max_model_len() const { return options_.max_model_len; }

 private:
  absl::Status ValidatePrompt(const GenerateInput& input, ValidatedRequest* out) const;
  absl::Status ValidateSampling(const GenerateInput& input, ValidatedRequest* out) const;
  absl::Status ValidateStops(const GenerateInput& input, ValidatedRequest* out) const;
  absl::Status ValidateLogits(const GenerateInput& input, ValidatedRequest* out) const;
  uint64_t NextSeed() const;

  const Tokenizer& tokenizer_;
  const ValidatorOptions options_;
  mutable absl::Mutex seed_mu_;
  mutable absl::BitGen bitgen_ ABSL_GUARDED_BY(seed_mu_);
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_REQUEST_VALIDATOR_H_
