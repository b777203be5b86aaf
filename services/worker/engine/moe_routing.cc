#include "services/worker/engine/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "glog/logging.h"

namespace folio::worker {

void RouteTokens(const float* logits, int64_t num_tokens, int32_t num_experts, int32_t k,
                 bool normalize, float scale, MoeRouting* out) {
  CHECK_GE(k, 1);
  CHECK_LE(k, num_experts);
  out->routes.resize(static_cast<size_t>(num_tokens * k));
  std::vector<float> probs(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  // The smallest normal f16, llama.cpp's floor for the sum of the chosen weights.
  constexpr float kMinSum = 6.103515625e-5f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    const float max = *std::max_element(row, row + num_experts);
    float sum = 0.0f;
    for (int32_t e = 0; e < num_experts; ++e) {
      probs[e] = std::exp(row[e] - max);
      sum += probs[e];
    }
    for (float& p : probs) p /= sum;
    for (int32_t e = 0; e < num_experts; ++e) order[e] = e;
    // NaN (from non-finite router weights) ranks below everything: a strict weak order.
    auto key = [&](int32_t e) { return std::isnan(probs[e]) ? -INFINITY : probs[e]; };
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) {
                        return key(a) > key(b) || (key(a) == key(b) && a < b);
                      });
    float chosen = 0.0f;
    for (int32_t j = 0; j < k; ++j) chosen += probs[order[j]];
    const float divisor = normalize ? std::max(chosen, kMinSum) : 1.0f;
    for (int32_t j = 0; j < k; ++j) {
      out->routes[t * k + j] = {order[j], probs[order[j]] / divisor * scale};
    }
  }
  // Group by expert (a counting sort keeps each expert's rows in increasing order).
  out->offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (const ExpertRoute& r : out->routes) ++out->offsets[r.expert + 1];
  for (int32_t e = 0; e < num_experts; ++e) out->offsets[e + 1] += out->offsets[e];
  out->rows.resize(out->routes.size());
  out->weights.resize(out->routes.size());
  std::vector<int64_t> next(out->offsets.begin(), out->offsets.end() - 1);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int32_t j = 0; j < k; ++j) {
      const ExpertRoute& r = out->routes[t * k + j];
      const int64_t i = next[r.expert]++;
      out->rows[i] = t;
      out->weights[i] = r.weight;
    }
  }
}

}  // namespace folio::worker
