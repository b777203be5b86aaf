// The request mix of folio-bench: prompt and output lengths drawn from a seed, so a run
// repeats exactly, and the prompt token ids themselves.
#ifndef FOLIO_TOOLS_BENCH_WORKLOAD_H_
#define FOLIO_TOOLS_BENCH_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace folio::bench {

struct WorkloadOptions {
  // sharegpt-like, alpaca-like, fixed, shared-prefix, parallel-sampling or beam.
  //  * shared-prefix: one prefix of prefix_len tokens common to every request, then
  //    suffix_len tokens of its own; output_len tokens out.
  //  * parallel-sampling: alpaca-like lengths (capped by max_input_len / max_output_len),
  //    n drawn uniformly in [min_width, max_width].
  //  * beam: alpaca-like lengths, beam_width drawn uniformly in [min_width, max_width] and
  //    n = beam_width (every beam is returned, so output tokens count all the beams' work).
  std::string name = "sharegpt-like";
  int num_requests = 64;
  uint64_t seed = 0;
  int max_input_len = 512;   // caps of the log-normal workloads
  int max_output_len = 512;
  int input_len = 128;       // fixed
  int output_len = 128;      // fixed, shared-prefix
  int prefix_len = 1000;     // shared-prefix
  int suffix_len = 32;       // shared-prefix
  int min_width = 2;         // parallel-sampling (n), beam (beam_width)
  int max_width = 6;
  // The model's: ids drawn for prompts lie in [0, vocab_size) minus the special ones, and
  // input + output is held to max_model_len (the prompt is shortened first).
  int vocab_size = 0;
  int max_model_len = 0;
  std::vector<int32_t> special_ids;  // never drawn (BOS, EOS, unknown)
};

struct BenchRequest {
  std::vector<int32_t> prompt_token_ids;
  int output_len = 0;  // max_tokens, with ignore_eos
  int n = 1;           // choices asked for (parallel sampling when > 1)
  int beam_width = 0;  // beam search of this width when > 0 (then n <= beam_width)
  // Greedy (0) unless the workload samples: parallel-sampling draws its n choices at
  // temperature 1 with a seed of the request's own, so a run repeats.
  float temperature = 0;
  uint64_t sampling_seed = 0;  // sent when temperature > 0
};

// The requests of a workload, or InvalidArgument naming the bad option.
absl::StatusOr<std::vector<BenchRequest>> MakeWorkload(const WorkloadOptions& options);

// Arrival offsets in seconds from the start, one per request: Poisson at `rate` per
// second (exponential gaps, from `seed`), or all zero when rate is infinite.
std::vector<double> ArrivalTimes(int n, double rate, uint64_t seed);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_WORKLOAD_H_
