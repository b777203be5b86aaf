// Beam search bookkeeping, free of the step loop: ranking candidates, choosing the beams
// that survive a step, keeping the best finished beams, and the stopping rule.
//
// The rules (the step loop in scheduler.cc applies them once every live beam has its
// top 2k next-token candidates, k = beam width):
//  * Every candidate of every live beam is an expansion scored by its cumulative
//    log-prob (the beam's plus the token's). Expansions are ranked by that score,
//    highest first; ties go to the lower token id, then to the lower parent beam.
//  * Going down the ranking until k beams continue: an expansion whose token ends the
//    request (EOS unless ignore_eos, or a stop token id) becomes a finished beam if it
//    ranks among the first k, and is dropped otherwise; any other expansion continues.
//  * A beam that reaches max_tokens (or the context) finishes with reason length.
//  * A finished beam's score is cum_logprob / length^length_penalty (length counts the
//    generated tokens, the ending one included). The best k finished beams are kept:
//    higher score first, then the lexicographically smaller token list.
//  * Early stopping: the search ends when no beam is live, or when k beams have finished
//    and no live beam can still beat the worst of them. The bound is exact: log-probs
//    are <= 0, so a live beam's best reachable score is cum / length^penalty at its
//    current length when penalty <= 0, and cum / max_tokens^penalty when penalty > 0
//    (a longer beam divides by more).
//  * The request returns the best n finished beams (n <= k); fewer only when fewer than
//    n ever finished (every candidate ended the request or was dropped).
//
// Plain values and functions; thread-compatible.
#ifndef FOLIO_SERVICES_SCHEDULER_BEAM_SEARCH_H_
#define FOLIO_SERVICES_SCHEDULER_BEAM_SEARCH_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace folio::scheduler {

// One candidate continuation of a live beam.
struct Expansion {
  int32_t parent = 0;        // index of the live beam it extends
  int32_t token_id = 0;
  float logprob = 0.0f;      // of token_id
  double cum_logprob = 0.0;  // the parent's plus logprob
};

// True when `a` ranks before `b`: higher cum_logprob, then lower token id, then lower parent.
bool RanksBefore(const Expansion& a, const Expansion& b);

// Ranks `expansions` and splits them by the rule above: up to `width` that continue (in
// rank order) and those that finish, among the first `width` ranks (in rank order).
void SelectExpansions(std::vector<Expansion> expansions, int32_t width,
                      const std::function<bool(int32_t token_id)>& ends_request,
                      std::vector<Expansion>* survivors, std::vector<Expansion>* finished);

// cum_logprob / length^length_penalty.
double BeamScore(double cum_logprob, int32_t length, float length_penalty);

// The best score a live beam of `length` tokens could still reach, generating at most
// `max_length` tokens in all.
double BestReachableScore(double cum_logprob, int32_t length, int32_t max_length,
                          float length_penalty);

struct Hypothesis {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  double cum_logprob = 0.0;
  double score = 0.0;
  bool stopped = false;  // ended by EOS or a stop token (else by length)
};

// The best `capacity` finished beams.
class FinishedBeams {
 public:
  void set_capacity(int32_t capacity) { capacity_ = capacity; }
  // Keeps `h` if it is among the best `capacity` (BeamScore must be filled in).
  void Add(Hypothesis h);
  // Whether the search can stop: capacity beams are kept and none of the live beams'
  // best reachable scores beats the worst of them.
  bool Done(const std::vector<double>& live_best_reachable) const;
  // The best n, best first.
  std::vector<Hypothesis> Best(int32_t n) const;
  int32_t size() const { return static_cast<int32_t>(beams_.size()); }

 private:
  int32_t capacity_ = 1;
  std::vector<Hypothesis> beams_;  // sorted, best first
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_BEAM_SEARCH_H_
