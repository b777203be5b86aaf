#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace folio::bench {
namespace {

// Log-normal with the given mean: mu = ln(mean) - sigma^2 / 2.
int LogNormalLength(std::mt19937_64& rng, double mean, double sigma, int cap) {
  std::lognormal_distribution<double> dist(std::log(mean) - sigma * sigma / 2, sigma);
  const double v = std::round(dist(rng));
  return static_cast<int>(std::clamp(v, 1.0, static_cast<double>(cap)));
}

// Appends `count` ordinary token ids (not one of `special`) drawn from `rng`.
void DrawTokens(std::mt19937_64& rng, const WorkloadOptions& o, int count,
                std::vector<int32_t>* out) {
  std::uniform_int_distribution<int32_t> token(0, o.vocab_size - 1);
  const size_t want = out->size() + std::max(count, 0);
  while (out->size() < want) {
    const int32_t id = token(rng);
    if (std::find(o.special_ids.begin(), o.special_ids.end(), id) != o.special_ids.end()) {
      continue;
    }
    out->push_back(id);
  }
}

bool IsLogNormal(const std::string& name) {
  return name == "sharegpt-like" || name == "alpaca-like" || name == "parallel-sampling" ||
         name == "beam";
}

absl::Status Check(const WorkloadOptions& o) {
  if (o.num_requests < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_requests is ", o.num_requests,
                                                   "; it must be at least 1"));
  }
  if (o.vocab_size <= static_cast<int>(o.special_ids.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", o.vocab_size,
                                                   " leaves no ordinary token to draw"));
  }
  if (o.max_model_len < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_model_len is ", o.max_model_len, "; it must be at least 2"));
  }
  if (!IsLogNormal(o.name) && o.name != "fixed" && o.name != "shared-prefix") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown workload \"", o.name,
                     "\"; expected sharegpt-like, alpaca-like, fixed, shared-prefix, "
                     "parallel-sampling or beam"));
  }
  if (o.name == "fixed" && (o.input_len < 1 || o.output_len < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("input_len ", o.input_len, " and output_len ",
                                                   o.output_len, " must both be at least 1"));
  }
  if (o.name == "shared-prefix" && (o.prefix_len < 1 || o.suffix_len < 0 || o.output_len < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix_len ", o.prefix_len, ", suffix_len ", o.suffix_len,
                     " and output_len ", o.output_len,
                     ": prefix_len and output_len must be at least 1, suffix_len at least 0"));
  }
  if (IsLogNormal(o.name) && (o.max_input_len < 1 || o.max_output_len < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("max_input_len ", o.max_input_len,
                                                   " and max_output_len ", o.max_output_len,
                                                   " must both be at least 1"));
  }
  if ((o.name == "parallel-sampling" || o.name == "beam") &&
      (o.min_width < 1 || o.max_width < o.min_width)) {
    return absl::InvalidArgumentError(absl::StrCat("min_width ", o.min_width, " and max_width ",
                                                   o.max_width,
                                                   ": need 1 <= min_width <= max_width"));
  }
  return absl::OkStatus();
}

// shared-prefix: the common prefix first, then each request's own part. Lengths are held to
// max_model_len by cutting the unique part (to no less than one token when suffix_len > 0),
// then the prefix; every request is cut alike, so the prefix stays common.
std::vector<BenchRequest> SharedPrefix(const WorkloadOptions& o, std::mt19937_64& rng) {
  const int out_len = std::min(o.output_len, o.max_model_len - 1);
  const int room = o.max_model_len - out_len;
  int suffix = o.suffix_len;
  if (o.prefix_len + suffix > room) {
    suffix = std::max(std::min(o.suffix_len, 1), room - o.prefix_len);
  }
  const int prefix = std::min(o.prefix_len, room - suffix);
  std::vector<int32_t> common;
  DrawTokens(rng, o, prefix, &common);
  std::vector<BenchRequest> out(o.num_requests);
  for (BenchRequest& r : out) {
    r.output_len = out_len;
    r.prompt_token_ids = common;
    DrawTokens(rng, o, suffix, &r.prompt_token_ids);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<BenchRequest>> MakeWorkload(const WorkloadOptions& o) {
  if (absl::Status s = Check(o); !s.ok()) return s;
  std::mt19937_64 rng(o.seed);
  if (o.name == "shared-prefix") return SharedPrefix(o, rng);
  double mean_in = 19, mean_out = 58;  // alpaca-like, parallel-sampling, beam
  if (o.name == "sharegpt-like") mean_in = 161, mean_out = 338;
  std::uniform_int_distribution<int> width(o.min_width, o.max_width);
  std::vector<BenchRequest> out(o.num_requests);
  for (size_t i = 0; i < out.size(); ++i) {
    BenchRequest& r = out[i];
    int in_len = o.input_len, out_len = o.output_len;
    if (o.name != "fixed") {
      in_len = LogNormalLength(rng, mean_in, 1.0, o.max_input_len);
      out_len = LogNormalLength(rng, mean_out, 1.0, o.max_output_len);
    }
    if (o.name == "parallel-sampling") {
      r.n = width(rng);
      r.temperature = 1.0f;
      r.sampling_seed = o.seed * 1000003 + i;
    }
    if (o.name == "beam") r.n = r.beam_width = width(rng);
    out_len = std::min(out_len, o.max_model_len - 1);
    in_len = std::min(in_len, o.max_model_len - out_len);
    r.output_len = out_len;
    r.prompt_token_ids.reserve(in_len);
    DrawTokens(rng, o, in_len, &r.prompt_token_ids);
  }
  return out;
}

std::vector<double> ArrivalTimes(int n, double rate, uint64_t seed) {
  std::vector<double> times(std::max(n, 0), 0.0);
  if (!std::isfinite(rate)) return times;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& v : times) {
    v = t;
    t += gap(rng);
  }
  return times;
}

}  // namespace folio::bench
