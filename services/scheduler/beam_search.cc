#include "services/scheduler/beam_search.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace folio::scheduler {

bool RanksBefore(const Expansion& a, const Expansion& b) {
  if (a.cum_logprob != b.cum_logprob) return a.cum_logprob > b.cum_logprob;
  return std::tie(a.token_id, a.parent) < std::tie(b.token_id, b.parent);
}

void SelectExpansions(std::vector<Expansion> expansions, int32_t width,
                      const std::function<bool(int32_t)>& ends_request,
                      std::vector<Expansion>* survivors, std::vector<Expansion>* finished) {
  std::sort(expansions.begin(), expansions.end(), RanksBefore);
  for (size_t rank = 0; rank < expansions.size(); ++rank) {
    if (static_cast<int32_t>(survivors->size()) >= width) break;
    const Expansion& e = expansions[rank];
    if (ends_request(e.token_id)) {
      if (static_cast<int32_t>(rank) < width) finished->push_back(e);
      continue;
    }
    survivors->push_back(e);
  }
}

double BeamScore(double cum_logprob, int32_t length, float length_penalty) {
  if (length_penalty == 0.0f || length <= 0) return cum_logprob;
  return cum_logprob / std::pow(static_cast<double>(length), length_penalty);
}

double BestReachableScore(double cum_logprob, int32_t length, int32_t max_length,
                          float length_penalty) {
  return BeamScore(cum_logprob, length_penalty > 0.0f ? std::max(length, max_length) : length,
                   length_penalty);
}

namespace {

bool Better(const Hypothesis& a, const Hypothesis& b) {
  if (a.score != b.score) return a.score > b.score;
  return a.tokens < b.tokens;
}

}  // namespace

void FinishedBeams::Add(Hypothesis h) {
  auto at = std::upper_bound(beams_.begin(), beams_.end(), h, Better);
  if (at - beams_.begin() >= capacity_) return;
  beams_.insert(at, std::move(h));
  if (static_cast<int32_t>(beams_.size()) > capacity_) beams_.pop_back();
}

bool FinishedBeams::Done(const std::vector<double>& live_best_reachable) const {
  if (live_best_reachable.empty()) return true;
  if (static_cast<int32_t>(beams_.size()) < capacity_) return false;
  const double worst = beams_.back().score;
  for (double s : live_best_reachable) {
    if (s > worst) return false;
  }
  return true;
}

std::vector<Hypothesis> FinishedBeams::Best(int32_t n) const {
  return std::vector<Hypothesis>(beams_.begin(),
                                 beams_.begin() + std::min<size_t>(beams_.size(), n));
}

}  // namespace folio::scheduler
