#include "services/frontend/request_validator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "glog/logging.h"
#include "services/frontend/request_id.h"
#include "services/worker/engine/logits_processor.h"

namespace folio::frontend {
namespace {

// Written so that NaN fails every range check: comparisons with NaN are false.
bool InClosedRange(float value, float lo, float hi) { return value >= lo && value <= hi; }

absl::Status CheckTokenIds(const std::vector<int32_t>& ids, int32_t vocab_size, const char* field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] is ", ids[i], "; token ids must be in [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

RequestValidator::RequestValidator(const Tokenizer& tokenizer, ValidatorOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  CHECK_GT(options_.max_model_len, 0) << "max_model_len must be positive";
}

absl::StatusOr<ValidatedRequest> RequestValidator::Validate(const GenerateInput& input) const {
  ValidatedRequest out;
  if (input.request_id.empty()) {
    out.request_id = options_.request_id_source ? options_.request_id_source() : NewRequestId();
  } else {
    if (static_cast<int64_t>(input.request_id.size()) > options_.max_request_id_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("request_id is ", input.request_id.size(), " bytes; at most ",
                       options_.max_request_id_bytes, " are allowed"));
    }
    for (size_t i = 0; i < input.request_id.size(); ++i) {
      const unsigned char c = input.request_id[i];
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(
            "request_id has a byte outside printable ASCII (0x21..0x7e) at offset ", i));
      }
    }
    out.request_id = input.request_id;
  }
  if (absl::Status s = ValidatePrompt(input, &out); !s.ok()) return s;
  if (absl::Status s = ValidateSampling(input, &out); !s.ok()) return s;
  if (absl::Status s = ValidateStops(input, &out); !s.ok()) return s;
  if (absl::Status s = ValidateLogits(input, &out); !s.ok()) return s;
  if (input.structured.kind != structured::StructuredOutput::Kind::kNone) {
    absl::StatusOr<std::string> grammar = structured::ToGrammar(input.structured);
    if (!grammar.ok()) {
      const char* field = input.structured.kind == structured::StructuredOutput::Kind::kRegex
                              ? "regex"
                          : input.structured.kind == structured::StructuredOutput::Kind::kGrammar
                              ? "grammar"
                              : "response_format";
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is invalid: ", grammar.status().message()));
    }
    out.grammar = *std::move(grammar);
    if (absl::Status s = structured::ValidateGrammarTriggers(input.grammar_triggers,
                                                             tokenizer_.vocab_size());
        !s.ok()) {
      return s;
    }
    out.grammar_triggers = input.grammar_triggers;
  } else if (!input.grammar_triggers.empty()) {
    return absl::InvalidArgumentError("grammar_triggers: set without a grammar");
  }
  return out;
}

absl::Status RequestValidator::ValidatePrompt(const GenerateInput& input,
                                              ValidatedRequest* out) const {
  if (!input.prompt.empty() && !input.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError(
        "prompt and prompt_token_ids are both set; give exactly one of them");
  }
  if (!input.prompt_token_ids.empty()) {
    if (absl::Status s =
            CheckTokenIds(input.prompt_token_ids, tokenizer_.vocab_size(), "prompt_token_ids");
        !s.ok()) {
      return s;
    }
    out->prompt_token_ids = input.prompt_token_ids;
  } else {
    if (const size_t bad = utf8::FindInvalid(input.prompt); bad != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt is not valid UTF-8 at byte offset ", bad));
    }
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer_.Encode(input.prompt, AddBos::kVocabDefault,
                          input.parse_special.value_or(true) ? ParseSpecial::kYes
                                                             : ParseSpecial::kNo);
    if (!ids.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message()));
    }
    out->prompt_token_ids = *std::move(ids);
    if (out->prompt_token_ids.empty()) {
      return absl::InvalidArgumentError(
          "prompt is empty and this model adds no BOS token; give a prompt or "
          "prompt_token_ids");
    }
  }

  out->max_tokens = input.max_tokens.value_or(16);
  if (out->max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens is ", out->max_tokens, "; it must be at least 1"));
  }
  const int64_t num_prompt = static_cast<int64_t>(out->prompt_token_ids.size());
  // Each message opens with the field it is about (the HTTP API's error "param").
  if (num_prompt >= options_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt has ", num_prompt, " tokens; the context (max_model_len) is ",
        options_.max_model_len, " tokens, so a prompt may have at most ",
        options_.max_model_len - 1, " to leave room for one generated token"));
  }
  if (num_prompt + out->max_tokens > options_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens is ", out->max_tokens, "; with the prompt's ", num_prompt,
        " tokens it may be at most ", options_.max_model_len - num_prompt,
        " (prompt and output together fit max_model_len ", options_.max_model_len, ")"));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::ValidateSampling(const GenerateInput& input,
                                                ValidatedRequest* out) const {
  out->temperature = input.temperature.value_or(1.0f);
  if (!InClosedRange(out->temperature, 0.0f, 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature is ", out->temperature, "; it must be in [0, 2]"));
  }
  out->top_p = input.top_p.value_or(1.0f);
  if (!(out->top_p > 0.0f && out->top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p is ", out->top_p, "; it must be in (0, 1]"));
  }
  out->top_k = input.top_k.value_or(0);
  if (out->top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k is ", out->top_k, "; it must be >= 0 (0 turns it off)"));
  }
  out->min_p = input.min_p.value_or(0.0f);
  if (!InClosedRange(out->min_p, 0.0f, 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p is ", out->min_p, "; it must be in [0, 1]"));
  }
  if (input.logprobs.has_value() &&
      (*input.logprobs < 0 || *input.logprobs > options_.max_logprobs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        input.logprobs_field, " is ", *input.logprobs, "; it must be in [0, ",
        options_.max_logprobs, "]"));
  }
  out->logprobs = input.logprobs;
  out->n = input.n.value_or(1);
  if (out->n < 1 || out->n > options_.max_n) {
    return absl::InvalidArgumentError(
        absl::StrCat("n is ", out->n, "; it must be in [1, ", options_.max_n, "]"));
  }
  out->beam_width = input.beam_width.value_or(0);
  if (out->beam_width < 0 || out->beam_width > options_.max_beam_width) {
    return absl::InvalidArgumentError(absl::StrCat("beam_width is ", out->beam_width,
                                                   "; it must be in [0, ",
                                                   options_.max_beam_width, "]"));
  }
  if (out->beam_width > 0 && out->n > out->beam_width) {
    return absl::InvalidArgumentError(absl::StrCat("n is ", out->n, " and beam_width is ",
                                                   out->beam_width,
                                                   "; beam search returns at most beam_width "
                                                   "beams, so n must not exceed it"));
  }
  if (input.length_penalty.has_value()) {
    if (out->beam_width == 0) {
      return absl::InvalidArgumentError(
          "length_penalty applies to beam search only; set beam_width too");
    }
    if (!std::isfinite(*input.length_penalty)) {
      return absl::InvalidArgumentError("length_penalty must be a finite number");
    }
    out->length_penalty = *input.length_penalty;
  }
  out->seed = input.seed.has_value() ? *input.seed : NextSeed();
  out->ignore_eos = input.ignore_eos ? IgnoreEos::kYes : IgnoreEos::kNo;
  return absl::OkStatus();
}

absl::Status RequestValidator::ValidateStops(const GenerateInput& input,
                                             ValidatedRequest* out) const {
  if (static_cast<int64_t>(input.stop.size()) > options_.max_stop_strings) {
    return absl::InvalidArgumentError(absl::StrCat("stop has ", input.stop.size(),
                                                   " strings; at most ", options_.max_stop_strings,
                                                   " are allowed"));
  }
  for (size_t i = 0; i < input.stop.size(); ++i) {
    const std::string& stop = input.stop[i];
    if (stop.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is empty"));
    }
    if (static_cast<int64_t>(stop.size()) > options_.max_stop_string_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is ", stop.size(),
                                                     " bytes; each must be 1 to ",
                                                     options_.max_stop_string_bytes, " bytes"));
    }
    if (const size_t bad = utf8::FindInvalid(stop); bad != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] is not valid UTF-8 at byte offset ", bad));
    }
  }
  out->stop = input.stop;
  if (absl::Status s =
          CheckTokenIds(input.stop_token_ids, tokenizer_.vocab_size(), "stop_token_ids");
      !s.ok()) {
    return s;
  }
  out->stop_token_ids = input.stop_token_ids;
  return absl::OkStatus();
}

// The ranges are the worker's own (logits_processor.h), so every layer holds one rule.
absl::Status RequestValidator::ValidateLogits(const GenerateInput& input,
                                              ValidatedRequest* out) const {
  worker::SamplingParams p;
  p.presence_penalty = input.presence_penalty.value_or(0.0f);
  p.frequency_penalty = input.frequency_penalty.value_or(0.0f);
  p.repetition_penalty = input.repetition_penalty.value_or(1.0f);
  for (const auto& [token, bias] : input.logit_bias) p.logit_bias.push_back({token, bias});
  if (absl::Status s = worker::ValidateLogitsParams(p, tokenizer_.vocab_size()); !s.ok()) {
    return s;
  }
  out->min_tokens = input.min_tokens.value_or(0);
  if (out->min_tokens < 0 || out->min_tokens > out->max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens is ", out->min_tokens,
                                                   "; it must be in [0, max_tokens = ",
                                                   out->max_tokens, "]"));
  }
  if (input.num_speculative_tokens.has_value()) {
    out->num_speculative_tokens = *input.num_speculative_tokens;
    if (out->num_speculative_tokens < 0 || out->num_speculative_tokens > 16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_speculative_tokens is ", out->num_speculative_tokens, "; it must be in [0, 16]"));
    }
  }
  if (out->beam_width > 0) {
    const char* field = p.presence_penalty != 0.0f    ? "presence_penalty"
                        : p.frequency_penalty != 0.0f ? "frequency_penalty"
                        : p.repetition_penalty != 1.0f ? "repetition_penalty"
                        : !p.logit_bias.empty()        ? "logit_bias"
                        : out->min_tokens > 0          ? "min_tokens"
                                                       : nullptr;
    if (field != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is not supported with beam search (beams are ranked by the model's own "
                 "log-probs); leave it unset or use sampling"));
    }
  }
  out->presence_penalty = p.presence_penalty;
  out->frequency_penalty = p.frequency_penalty;
  out->repetition_penalty = p.repetition_penalty;
  out->logit_bias = input.logit_bias;
  std::sort(out->logit_bias.begin(), out->logit_bias.end());
  return absl::OkStatus();
}

uint64_t RequestValidator::NextSeed() const {
  absl::MutexLock lock(&seed_mu_);
  if (options_.seed_source) return options_.seed_source();
  return absl::Uniform<uint64_t>(bitgen_);
}

}  // namespace folio::frontend
