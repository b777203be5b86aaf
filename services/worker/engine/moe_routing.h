// Mixture-of-experts routing: which experts each token of a step runs, with what
// weight, and the step's tokens grouped by expert so each expert's weights are read
// once a step (not once a token).
//
// Routing follows the models' own definition (Qwen3-MoE's and Mixtral's sparse MoE
// blocks, as llama.cpp's build_moe_ffn computes them with softmax gating): the router's
// logits go through a softmax over all experts; a token takes the k experts of highest
// probability; their weights are those probabilities, divided by their sum when
// `normalize` (the sum clamped below at 2^-14, as llama.cpp does), then times `scale`.
// Ties between equal probabilities go to the lower expert index, so routing is a pure
// function of the logits (the same on every tensor-parallel rank, and the same whether
// a token runs alone or in a batch).
// Free functions and a plain struct; thread-compatible.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_MOE_ROUTING_H_
#define FOLIO_SERVICES_WORKER_ENGINE_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

namespace folio::worker {

struct ExpertRoute {
  int32_t expert = 0;
  float weight = 0.0f;
};

struct MoeRouting {
  // routes[t * k + j]: token t's j-th choice, by decreasing probability.
  std::vector<ExpertRoute> routes;
  // Token rows grouped by expert: expert e's tokens are rows[offsets[e] .. offsets[e + 1])
  // in increasing row order, with their weights in weights[...] (same indexes).
  std::vector<int64_t> offsets;  // num_experts + 1
  std::vector<int64_t> rows;
  std::vector<float> weights;
};

// Routes `num_tokens` tokens whose router logits are the rows of `logits` (row stride
// num_experts) to k of num_experts experts each (1 <= k <= num_experts), filling `out`
// (its vectors are reused across calls).
void RouteTokens(const float* logits, int64_t num_tokens, int32_t num_experts, int32_t k,
                 bool normalize, float scale, MoeRouting* out);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_MOE_ROUTING_H_
