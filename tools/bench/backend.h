// The protocols folio-bench can drive a server with, behind one interface: Folio's gRPC
// API (grpc_client.h) and the OpenAI-compatible HTTP API (openai_client.h).
#ifndef FOLIO_TOOLS_BENCH_BACKEND_H_
#define FOLIO_TOOLS_BENCH_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/bench/report.h"
#include "tools/bench/workload.h"

namespace folio::bench {

// What the workload needs to know of the served model.
struct ModelFacts {
  std::string name;
  int vocab_size = 0;
  int max_model_len = 0;
  std::vector<int32_t> special_ids;  // never drawn into prompts
};

class Backend {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Backend() = default;

  // Reaches the server and learns the model: Unavailable (or the server's error) when it
  // cannot be reached, InvalidArgument when the facts cannot be made out.
  virtual absl::StatusOr<ModelFacts> Connect() = 0;

  // OK, or why this backend cannot send `request` (checked for every request before the
  // run starts).
  virtual absl::Status CanSend(const BenchRequest& request) const = 0;

  // Sends `request` and fills `out` (sent, status, tokens, timings). Called from many
  // threads at once. A deadline cuts the request off as DEADLINE_EXCEEDED.
  virtual void Run(const BenchRequest& request, std::optional<Clock::time_point> deadline,
                   RequestResult* out) = 0;
};

inline double Seconds(Backend::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_BACKEND_H_
