#include "services/scheduler/sharing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "glog/logging.h"
#include "services/scheduler/beam_search.h"

namespace folio::scheduler {

using cachemgr::SeqId;
using cachemgr::SeqStatus;

void Sharing::Advance(
    Request* r, const BranchOutputs& outs) {
  const uint64_t arrival = r->arrival;
  const bool root_reached_prompt_end = r->branches[0].num_computed == r->prompt_len();
  if (r->beam()) {
    AdvanceBeams(r, outs);
  } else {
    AdvanceSamples(r, outs);
  }
  if (state_->Find(arrival) == nullptr) return;  // finished
  if (root_reached_prompt_end) ForkFromRoot(r);
}

void Sharing::AdvanceSamples(
    Request* r, const BranchOutputs& outs) {
  const absl::Time now = absl::Now();
  // (branch index, samples) for the branches that produced tokens this step: one each,
  // or a verification's accepted proposals and the token after them (speculation.h).
  std::vector<std::pair<int32_t, absl::Span<const worker::SampledToken>>> drawn;
  for (const auto& [i, out] : outs) {
    if (out->samples.empty()) continue;
    if (!r->fanned_out) {
      // The root's n first tokens: sample k goes to the branch of choice k, forked from
      // the root. A new request makes those branches now; a continuation has them already
      // (StartBranches), and only its choices without a token take one from this draw.
      r->fanned_out = true;
      CHECK_EQ(i, 0);
      CHECK_EQ(static_cast<int32_t>(out->samples.size()), r->spec.n);
      if (r->spec.continuation.empty()) {
        for (int32_t k = 1; k < r->spec.n; ++k) {
          Branch& child = r->branches.emplace_back();
          child.index = k;
          child.matcher = r->branches[0].matcher;  // before the root takes its own token
          child.watch = r->branches[0].watch;
          child.mask = r->branches[0].mask;
        }
      }
      const Branch& root = r->branches[0];
      for (size_t j = 1; j < r->branches.size(); ++j) {
        Branch& child = r->branches[j];
        child.seq_id = state_->NewSeqId();
        child.block_table = root.block_table;
        child.window_tables = root.window_tables;
        child.num_computed = root.num_computed;
        QueueFork(r, root.seq_id, child.seq_id);
      }
      for (size_t j = 0; j < r->branches.size(); ++j) {
        if (r->branches[j].output.empty()) {
          drawn.push_back({static_cast<int32_t>(j),
                           absl::MakeConstSpan(&out->samples[r->branches[j].index], 1)});
        }
      }
    } else {
      drawn.push_back({i, absl::MakeConstSpan(out->samples)});
    }
  }
  if (drawn.empty()) return;
  if (r->num_generated == 0) {
    state_->metrics().ttft.Observe(absl::ToDoubleSeconds(now - r->arrival_time));
  } else {
    // A verification's tokens arrive together: the gap is shared among them, one
    // observation per token, so the histogram stays per token.
    size_t most = 0;
    for (const auto& d : drawn) most = std::max(most, d.second.size());
    const double gap = absl::ToDoubleSeconds(now - r->last_token_time) / static_cast<double>(most);
    for (size_t t = 0; t < most; ++t) state_->metrics().itl.Observe(gap);
  }
  r->last_token_time = now;

  std::vector<RequestEvent> events;
  std::vector<int32_t> ended;  // branch indices
  for (const auto& [i, samples] : drawn) {
    Branch& b = r->branches[i];
    RequestEvent event;
    event.index = b.index;
    event.num_prompt_tokens = r->prompt_len();
    event.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    // Token by token, as if each had its own step: tokens after one that ends the branch
    // are dropped.
    for (const worker::SampledToken& sample : samples) {
      b.output.push_back(sample.token_id);
      ++r->num_generated;
      ++state_->stats.generation_tokens;
      state_->metrics().generation_tokens.Increment();
      event.tokens.push_back({sample.token_id, sample.logprob, sample.top_logprobs});
      const auto& stops = r->spec.stop_token_ids;
      absl::Status grammar_error;
      const GrammarVerdict grammar = AdvanceGrammar(*r, &b, sample.token_id, &grammar_error);
      if (grammar == GrammarVerdict::kError) {
        state_->Finish(r, FinishReason::kError, std::move(grammar_error));
        return;
      }
      if (grammar == GrammarVerdict::kClosed ||
          (!r->spec.ignore_eos && state_->options().IsEndOfGeneration(sample.token_id)) ||
          std::find(stops.begin(), stops.end(), sample.token_id) != stops.end()) {
        event.finish = FinishReason::kStop;
      } else if (grammar == GrammarVerdict::kDeadEnd) {
        event.finish = FinishReason::kLength;
      } else if (static_cast<int32_t>(b.output.size()) >= r->spec.max_tokens ||
                 b.num_known_tokens(r->spec.prompt) >= r->max_len) {
        event.finish = FinishReason::kLength;
      }
      if (event.finish != FinishReason::kNone) break;
    }
    if (event.finish != FinishReason::kNone) ended.push_back(i);
    events.push_back(std::move(event));
  }
  std::sort(events.begin(), events.end(),
            [](const RequestEvent& a, const RequestEvent& b) { return a.index < b.index; });
  const bool all_ended = ended.size() == r->branches.size();
  if (!all_ended) {
    // Ended samples give their sequences back at once (the root's free waits for the
    // forks it feeds, see ApplyForks). The root's place goes to the next live branch.
    std::sort(ended.rbegin(), ended.rend());
    for (int32_t i : ended) {
      state_->ReleaseSeq(r->branches[i].seq_id);
      r->branches.erase(r->branches.begin() + i);
    }
  }
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    if (r->sink) r->sink(events[e]);
  }
  if (all_ended) {
    state_->Finish(r, std::move(events.back()));  // the last token and the finish reason travel together
  } else if (r->sink) {
    r->sink(events.back());
  }
}

void Sharing::AdvanceBeams(
    Request* r, const BranchOutputs& outs) {
  for (const auto& [i, out] : outs) {
    if (!out->candidates.empty()) r->branches[i].candidates = out->candidates;
  }
  for (const Branch& b : r->branches) {
    if (b.candidates.empty()) return;  // the beam step waits for every live beam
  }
  r->fanned_out = true;
  const int32_t k = r->spec.beam_width;
  std::vector<Expansion> expansions;
  for (size_t i = 0; i < r->branches.size(); ++i) {
    const Branch& b = r->branches[i];
    for (const worker::TokenLogprob& c : b.candidates) {
      expansions.push_back({static_cast<int32_t>(i), c.token_id, c.logprob,
                            b.cum_logprob + static_cast<double>(c.logprob)});
    }
  }
  const auto& stops = r->spec.stop_token_ids;
  auto ends = [&](int32_t token) {
    return (!r->spec.ignore_eos && state_->options().IsEndOfGeneration(token)) ||
           std::find(stops.begin(), stops.end(), token) != stops.end();
  };
  std::vector<Expansion> survivors;
  std::vector<Expansion> ended;
  SelectExpansions(std::move(expansions), k, ends, &survivors, &ended);

  auto hypothesis = [&](const Branch& parent, const Expansion& e, bool stopped) {
    Hypothesis h;
    h.tokens = parent.output;
    h.tokens.push_back(e.token_id);
    h.logprobs = parent.logprobs;
    h.logprobs.push_back(e.logprob);
    h.cum_logprob = e.cum_logprob;
    h.score = BeamScore(h.cum_logprob, static_cast<int32_t>(h.tokens.size()),
                        r->spec.length_penalty);
    h.stopped = stopped;
    return h;
  };
  for (const Expansion& e : ended) {
    r->finished_beams.Add(hypothesis(r->branches[e.parent], e, /*stopped=*/true));
  }
  // Survivors: the first one from a parent takes over the parent's sequence, the others
  // fork from it. Parents without survivors are freed.
  std::vector<Branch> next;
  std::vector<bool> parent_kept(r->branches.size(), false);
  const int32_t new_len = static_cast<int32_t>(r->branches[0].output.size()) + 1;
  const bool at_limit = new_len >= r->spec.max_tokens || r->prompt_len() + new_len >= r->max_len;
  for (const Expansion& e : survivors) {
    const Branch& parent = r->branches[e.parent];
    // Structured output: the survivor's grammar state; a closed structure ends the beam.
    std::optional<structured::GrammarMatcher> matcher = parent.matcher;
    std::optional<structured::TriggerWatch> watch = parent.watch;
    std::vector<uint32_t> mask;
    if (matcher.has_value() || watch.has_value()) {
      Branch probe;
      probe.matcher = std::move(matcher);
      probe.watch = std::move(watch);
      absl::Status grammar_error;
      const GrammarVerdict verdict = AdvanceGrammar(*r, &probe, e.token_id, &grammar_error);
      if (verdict == GrammarVerdict::kError) {
        state_->Finish(r, FinishReason::kError, std::move(grammar_error));
        return;
      }
      if (verdict == GrammarVerdict::kClosed || verdict == GrammarVerdict::kDeadEnd) {
        r->finished_beams.Add(hypothesis(parent, e, verdict == GrammarVerdict::kClosed));
        continue;
      }
      matcher = std::move(probe.matcher);
      watch = std::move(probe.watch);
      mask = std::move(probe.mask);
    }
    if (at_limit) {
      r->finished_beams.Add(hypothesis(parent, e, /*stopped=*/false));
      continue;
    }
    Branch b;
    if (!parent_kept[e.parent]) {
      parent_kept[e.parent] = true;
      b = parent;
    } else {
      b.seq_id = state_->NewSeqId();
      b.block_table = parent.block_table;
      b.window_tables = parent.window_tables;
      b.num_computed = parent.num_computed;
      b.output = parent.output;
      b.logprobs = parent.logprobs;
      QueueFork(r, parent.seq_id, b.seq_id);
    }
    b.output.push_back(e.token_id);
    b.logprobs.push_back(e.logprob);
    b.cum_logprob = e.cum_logprob;
    b.candidates.clear();
    b.matcher = std::move(matcher);
    b.watch = std::move(watch);
    b.mask = std::move(mask);
    next.push_back(std::move(b));
  }
  r->num_generated += static_cast<int64_t>(survivors.size() + ended.size());
  state_->stats.generation_tokens += static_cast<int64_t>(survivors.size() + ended.size());
  state_->metrics().generation_tokens.Increment(static_cast<double>(survivors.size() + ended.size()));
  for (size_t i = 0; i < r->branches.size(); ++i) {
    if (!parent_kept[i]) state_->ReleaseSeq(r->branches[i].seq_id);
  }
  r->branches = std::move(next);

  std::vector<double> reachable;
  for (const Branch& b : r->branches) {
    reachable.push_back(BestReachableScore(b.cum_logprob, static_cast<int32_t>(b.output.size()),
                                           r->spec.max_tokens, r->spec.length_penalty));
  }
  if (!r->finished_beams.Done(reachable)) return;

  std::vector<Hypothesis> best = r->finished_beams.Best(r->spec.n);
  const absl::Time now = absl::Now();
  state_->metrics().ttft.Observe(absl::ToDoubleSeconds(now - r->arrival_time));
  std::vector<RequestEvent> events;
  for (size_t i = 0; i < best.size(); ++i) {
    RequestEvent event;
    event.index = static_cast<int32_t>(i);
    for (size_t t = 0; t < best[i].tokens.size(); ++t) {
      event.tokens.push_back({best[i].tokens[t], best[i].logprobs[t], {}});
    }
    event.finish = best[i].stopped ? FinishReason::kStop : FinishReason::kLength;
    event.cumulative_logprob = best[i].cum_logprob;
    event.num_prompt_tokens = r->prompt_len();
    event.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    events.push_back(std::move(event));
  }
  CHECK(!events.empty()) << "a beam search always finishes some beam";
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    if (r->sink) r->sink(events[e]);
  }
  state_->Finish(r, std::move(events.back()));
}

Sharing::GrammarVerdict Sharing::AdvanceGrammar(const Request& r, Branch* b, int32_t token,
                                                absl::Status* error) {
  const std::string& request_id = r.spec.request_id;
  if (!b->matcher.has_value()) {
    if (!b->watch.has_value() || b->watch->fired()) return GrammarVerdict::kNone;
    std::optional<std::string> fed = b->watch->Accept(token, r.grammar->vocab().bytes(token));
    if (!fed.has_value()) return GrammarVerdict::kNone;
    // The trigger fired: the grammar starts at its first byte and constrains the rest.
    b->matcher.emplace(r.grammar);
    if (!b->matcher->AcceptBytes(*fed)) {
      if (!b->matcher->last_error().ok()) {
        *error = b->matcher->last_error();
        return GrammarVerdict::kError;
      }
      LOG(WARNING) << "request " << request_id << ": the grammar refuses the output from its "
                   << "trigger on (" << fed->size() << " bytes); ending the choice";
      return GrammarVerdict::kDeadEnd;
    }
  } else if (!b->matcher->AcceptToken(token)) {
    if (!b->matcher->last_error().ok()) {
      *error = b->matcher->last_error();
      return GrammarVerdict::kError;
    }
    // The workers apply the mask, so this is a broken invariant; end the choice rather
    // than stream text outside the structure.
    LOG(ERROR) << "request " << request_id << ": token " << token
               << " is outside the grammar's mask; ending the choice";
    return GrammarVerdict::kDeadEnd;
  }
  if (b->matcher->IsTerminated()) return GrammarVerdict::kClosed;
  b->mask.assign(structured::BitmaskWords(b->matcher->grammar().vocab().size()), 0);
  if (absl::Status s = b->matcher->FillNextTokenBitmask(absl::MakeSpan(b->mask)); !s.ok()) {
    *error = std::move(s);
    return GrammarVerdict::kError;
  }
  for (uint32_t w : b->mask) {
    if (w != 0) return GrammarVerdict::kOpen;
  }
  LOG(WARNING) << "request " << request_id
               << ": no token of the vocabulary continues the grammar here; ending the choice";
  return GrammarVerdict::kDeadEnd;
}

void Sharing::QueueFork(Request* r, uint64_t parent, uint64_t child) {
  state_->pending_forks.push_back({r, parent, child});
}

void Sharing::ForkFromRoot(Request* r) {
  Branch& root = r->branches[0];
  if (root.seq_id == 0 || root.num_computed != r->prompt_len()) return;
  for (Branch& b : r->branches) {
    if (b.seq_id != 0) continue;
    b.seq_id = state_->NewSeqId();
    b.block_table = root.block_table;
    b.window_tables = root.window_tables;
    b.num_computed = root.num_computed;
    QueueFork(r, root.seq_id, b.seq_id);
  }
}

void Sharing::ApplyForks() {
  if (state_->pending_forks.empty()) return;
  std::vector<PendingFork> forks = std::move(state_->pending_forks);
  state_->pending_forks.clear();
  cachemgr::StepRequest req;
  for (const PendingFork& f : forks) req.forks.push_back({SeqId{f.parent}, SeqId{f.child}});
  // Frees run before forks within one RPC: a parent freed this step (its own sample
  // ended) must outlive its forks, so its free waits for the next RPC.
  std::vector<SeqId> held;
  std::vector<SeqId> now;
  for (SeqId s : state_->pending_frees) {
    const bool parent = std::any_of(forks.begin(), forks.end(),
                                    [s](const PendingFork& f) { return f.parent == s.value; });
    (parent ? held : now).push_back(s);
  }
  state_->pending_frees = std::move(now);
  absl::StatusOr<cachemgr::StepResponse> resp = state_->CacheStep(std::move(req));
  state_->pending_frees.insert(state_->pending_frees.end(), held.begin(), held.end());
  if (!resp.ok()) {
    state_->Lose(LostService::kCache, resp.status());
    return;
  }
  std::vector<Request*> refused;
  for (size_t i = 0; i < forks.size(); ++i) {
    const cachemgr::SeqResult& res = resp->forks[i];
    Request* r = forks[i].request;
    auto b = std::find_if(r->branches.begin(), r->branches.end(),
                          [&](const Branch& x) { return x.seq_id == forks[i].child; });
    CHECK(b != r->branches.end());
    if (res.status != SeqStatus::kOk) {
      b->seq_id = 0;  // never created
      if (std::find(refused.begin(), refused.end(), r) == refused.end()) refused.push_back(r);
      continue;
    }
    RequestState::ApplyTable(&*b, res);
    for (const cachemgr::BlockCopy& c : res.copies) {
      state_->pending_copies.push_back({c.src.value, c.dst.value});
    }
  }
  // A fork can only find no room under the baseline policy, which copies: the group is
  // recomputed as a whole, like any preempted request.
  for (Request* r : refused) state_->Preempt(r);
}

}  // namespace folio::scheduler
