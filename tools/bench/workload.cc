#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace folio::bench {
namespace {

// Log-normal with the given mean: mu = ln(mean) - sigma^2 / 2.
int LogNormalLength(std::mt19937_64& rng, double mean, double sigma, int cap) {
  std::lognormal_distribution<double> dist(std::log(mean) - sigma * sigma / 2, sigma);
  const double v = std::round(dist(rng));
  return static_cast<int>(std::clamp(v, 1.0, static_cast<double>(cap)));
}

}  // namespace

absl::StatusOr<std::vector<BenchRequest>> MakeWorkload(const WorkloadOptions& o) {
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
  double mean_in = 0, mean_out = 0;
  if (o.name == "sharegpt-like") {
    mean_in = 161, mean_out = 338;
  } else if (o.name == "alpaca-like") {
    mean_in = 19, mean_out = 58;
  } else if (o.name != "fixed") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown workload \"", o.name, "\"; expected sharegpt-like, alpaca-like or fixed"));
  }
  if (o.name == "fixed" && (o.input_len < 1 || o.output_len < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("input_len ", o.input_len, " and output_len ",
                                                   o.output_len, " must both be at least 1"));
  }
  if (o.name != "fixed" && (o.max_input_len < 1 || o.max_output_len < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("max_input_len ", o.max_input_len,
                                                   " and max_output_len ", o.max_output_len,
                                                   " must both be at least 1"));
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, o.vocab_size - 1);
  std::vector<BenchRequest> out(o.num_requests);
  for (BenchRequest& r : out) {
    int in_len = o.input_len, out_len = o.output_len;
    if (o.name != "fixed") {
      in_len = LogNormalLength(rng, mean_in, 1.0, o.max_input_len);
      out_len = LogNormalLength(rng, mean_out, 1.0, o.max_output_len);
    }
    out_len = std::min(out_len, o.max_model_len - 1);
    in_len = std::min(in_len, o.max_model_len - out_len);
    r.output_len = out_len;
    r.prompt_token_ids.reserve(in_len);
    while (static_cast<int>(r.prompt_token_ids.size()) < in_len) {
      const int32_t id = token(rng);
      if (std::find(o.special_ids.begin(), o.special_ids.end(), id) != o.special_ids.end()) {
        continue;
      }
      r.prompt_token_ids.push_back(id);
    }
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
