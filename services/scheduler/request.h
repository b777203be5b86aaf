// The scheduler's record of one request, and the events it streams back. Owned by the
// Scheduler's loop thread. Thread-compatible.
#ifndef FOLIO_SERVICES_SCHEDULER_REQUEST_H_
#define FOLIO_SERVICES_SCHEDULER_REQUEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError };

// What a client asks for, in token ids (the frontend tokenizes).
struct RequestSpec {
  std::string request_id;
  std::vector<int32_t> prompt;
  worker::SamplingParams sampling;
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t num_logprobs = 0;
};

struct GeneratedToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<worker::TokenLogprob> top_logprobs;
};

// One message to the client: new tokens, and on the last one the finish reason (and,
// for kError, the status).
struct RequestEvent {
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::kNone;
  absl::Status error;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
};

// Receives a request's events on the loop thread; must not block. After an event with a
// finish reason no more events come.
using EventSink = std::function<void(const RequestEvent&)>;

struct Request {
  RequestSpec spec;
  EventSink sink;
  uint64_t arrival = 0;           // admission order; preemption takes the largest
  absl::Time arrival_time;
  std::vector<int32_t> output;    // generated tokens, streamed already
  // Live while running: the cache manager's sequence, its block table mirror and the
  // number of tokens (prompt + output) whose KV is computed.
  uint64_t seq_id = 0;
  std::vector<int32_t> block_table;
  int32_t num_computed = 0;
  int32_t max_len = 0;            // prompt + max_tokens, capped by max_model_len
  int32_t num_cached_prompt_tokens = 0;
  bool first_admission = true;
  absl::Time last_token_time;

  int32_t num_tokens() const { return static_cast<int32_t>(spec.prompt.size() + output.size()); }
  int32_t TokenAt(int32_t pos) const {
    const int32_t p = static_cast<int32_t>(spec.prompt.size());
    return pos < p ? spec.prompt[pos] : output[pos - p];
  }
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_REQUEST_H_
