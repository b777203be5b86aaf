#include "services/scheduler/step_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "services/scheduler/token_history.h"

namespace folio::scheduler {

using cachemgr::SeqId;
using cachemgr::SeqStatus;

PlannedStep StepPlanner::Plan() {
  PlannedStep plan;
  int32_t budget = state_->options().max_num_batched_tokens;
  cachemgr::StepResponse granted_results;
  plan.batch = ScheduleRunning(&budget, &granted_results, &plan.speculative_batch);
  if (state_->loss.has_value()) return {};
  std::vector<Granted> admitted = AdmitWaiting(&budget, &granted_results);
  if (state_->loss.has_value()) return {};
  plan.batch.insert(plan.batch.end(), admitted.begin(), admitted.end());
  if (plan.batch.empty()) return plan;

  // Copies made by forks (baseline policy) run before any copy-on-write of this step.
  plan.input.block_copies = std::move(state_->pending_copies);
  state_->pending_copies.clear();
  for (const cachemgr::SeqResult& r : granted_results.grants) {
    for (const cachemgr::BlockCopy& c : r.copies) {
      plan.input.block_copies.push_back({c.src.value, c.dst.value});
    }
  }
  TakeTransfers(&plan);
  for (const Granted& g : plan.batch) {
    plan.request_ids.push_back(g.request->spec.request_id);
    plan.input.seqs.push_back(MakeStep(*g.request, g));
    plan.num_tokens += g.num_tokens;
  }
  return plan;
}

void StepPlanner::TakeTransfers(PlannedStep* plan) {
  plan->input.host_transfers = std::move(state_->pending_transfers);
  state_->pending_transfers.clear();
  plan->transfers_ticket = state_->pending_transfers_ticket;
  state_->pending_transfers_ticket = 0;
}

void StepPlanner::ReturnTransfers(PlannedStep* plan) {
  if (plan->input.host_transfers.empty() || state_->loss.has_value()) return;
  // Ahead of any decided since: they run in the order the cache manager decided them.
  plan->input.host_transfers.insert(plan->input.host_transfers.end(),
                                    state_->pending_transfers.begin(),
                                    state_->pending_transfers.end());
  state_->pending_transfers = std::move(plan->input.host_transfers);
  plan->input.host_transfers.clear();
  state_->pending_transfers_ticket =
      std::max(state_->pending_transfers_ticket, plan->transfers_ticket);
}

void StepPlanner::FailCache(const absl::Status& status) {
  state_->Lose(LostService::kCache, status);
}

int32_t StepPlanner::Wanted(const Request& r, size_t i) {
  const Branch& b = r.branches[i];
  if (b.seq_id == 0) return 0;  // waits to fork from the root
  int32_t end = b.num_tokens(r.spec.prompt);
  if (i == 0) {
    for (const Branch& other : r.branches) {
      if (other.seq_id == 0) end = std::min(end, r.prompt_len());
    }
  }
  return end - b.num_computed;
}

bool StepPlanner::MaySpeculate(const Request& r) const {
  const SchedulerOptions& o = state_->options();
  return o.speculative.enabled() && r.spec.num_speculative_tokens != 0 && !r.beam() &&
         r.fanned_out && r.grammar == nullptr;
}

void StepPlanner::Propose(const Request& r, Branch* b, int32_t room) const {
  const SpeculativeOptions& o = state_->options().speculative;
  int32_t cap = o.num_tokens;
  if (r.spec.num_speculative_tokens > 0) cap = std::min(cap, r.spec.num_speculative_tokens);
  if (b->spec.k <= 0 || b->spec.k > cap) b->spec.k = cap;
  if (!ProposesThisStep(&b->spec)) return;
  // Every accepted proposal and the model's own token must fit the request's limits.
  const int32_t by_tokens = r.spec.max_tokens - static_cast<int32_t>(b->output.size()) - 1;
  const int32_t by_len = r.max_len - b->num_tokens(r.spec.prompt) - 1;
  const int32_t k = std::min({b->spec.k, by_tokens, by_len, room});
  if (k <= 0) return;
  if (o.mode == SpeculativeMode::kDraft) {
    // Placeholders: the workers' draft model writes its own. The cache manager holds them
    // as pending tokens until the accepted ones are resolved (Scheduler::AcceptProposals),
    // so a prefix-cache block never hashes a placeholder.
    b->draft.assign(k, cachemgr::kPendingToken);
    return;
  }
  b->draft = ProposeNgram(r.spec.prompt, b->output, k, o.ngram_min, o.ngram_max);
  if (o.synth_len > 0.0) {
    // Benchmarks: always k proposals, so the machinery's cost is measured at k.
    b->draft.resize(k, b->output.empty() ? r.spec.prompt.back() : b->output.back());
  }
}

std::vector<Granted> StepPlanner::ScheduleRunning(int32_t* budget,
                                                  cachemgr::StepResponse* copies,
                                                  bool* speculative_batch) {
  std::vector<Granted> want;
  // Speculation only while the batch of decoding branches is small (speculation.h).
  int32_t decoding = 0;
  for (Request* r : state_->running) {
    for (size_t i = 0; i < r->branches.size(); ++i) decoding += Wanted(*r, i) == 1 ? 1 : 0;
  }
  const bool speculate = state_->options().speculative.enabled() &&
                         decoding <= state_->options().speculative.max_batch;
  *speculative_batch = speculate;
  for (Request* r : state_->running) {
    for (size_t i = 0; i < r->branches.size(); ++i) {
      Branch& b = r->branches[i];
      b.draft.clear();
      int32_t n = std::min(Wanted(*r, i), *budget);
      if (n <= 0) continue;
      // Only at the branch's own end (not a root stopped at the prompt's end while the other
      // branches wait to fork from it); min_tokens suppresses tokens by count, position by
      // position: only once reached.
      if (speculate && n == 1 && b.num_computed + 1 == b.num_tokens(r->spec.prompt) &&
          MaySpeculate(*r) && static_cast<int32_t>(b.output.size()) >= r->spec.min_tokens) {
        if (b.pending_samples == 0) {
          Propose(*r, &b, *budget - 1);
          n += static_cast<int32_t>(b.draft.size());
        } else {
          // Pipelined past its pause's steps (Scheduler::Send): its last token is not
          // known yet, nothing is proposed, and the step counts off the pause.
          ProposesThisStep(&b.spec);
        }
      }
      want.push_back({r, static_cast<int32_t>(i), n});
      *budget -= n;
    }
  }
  std::vector<Granted> granted;
  while (!want.empty()) {
    cachemgr::StepRequest req;
    for (const Granted& g : want) {
      const Branch& b = g.request->branches[g.branch];
      cachemgr::GrantOp op{.seq = SeqId{b.seq_id}, .start_pos = b.num_computed};
      for (int32_t i = 0; i < g.num_tokens; ++i) {
        op.token_ids.push_back(b.TokenAt(g.request->spec.prompt, b.num_computed + i));
      }
      req.grants.push_back(std::move(op));
    }
    absl::StatusOr<cachemgr::StepResponse> resp = state_->CacheStep(std::move(req));
    if (!resp.ok()) {
      FailCache(resp.status());
      return {};
    }
    std::vector<Granted> retry;
    for (size_t i = 0; i < want.size(); ++i) {
      const cachemgr::SeqResult& res = resp->grants[i];
      if (res.status == SeqStatus::kOk) {
        RequestState::ApplyTable(&want[i].request->branches[want[i].branch], res);
        granted.push_back(want[i]);
        copies->grants.push_back(res);
      } else {
        retry.push_back(want[i]);
      }
    }
    if (retry.empty()) break;
    // No room: proposals are dropped first (ask again for one token each) ...
    bool dropped_proposals = false;
    for (Granted& g : retry) {
      Branch& b = g.request->branches[g.branch];
      if (b.draft.empty()) continue;
      const int32_t k = static_cast<int32_t>(b.draft.size());
      g.num_tokens -= k;
      *budget += k;
      b.draft.clear();
      dropped_proposals = true;
    }
    if (dropped_proposals) {
      want = std::move(retry);
      continue;
    }
    // ... then preempt the request that arrived last (all of its sequences), then ask
    // again for the rest.
    Request* victim = state_->running.back();
    auto drop = [victim](const Granted& g) { return g.request == victim; };
    for (const auto* list : {&granted, &retry}) {
      for (const Granted& g : *list) {
        if (g.request == victim) *budget += g.num_tokens;  // not computed this step after all
      }
    }
    granted.erase(std::remove_if(granted.begin(), granted.end(), drop), granted.end());
    std::vector<uint64_t> victim_seqs;
    for (const Branch& b : victim->branches) victim_seqs.push_back(b.seq_id);
    auto victims = [&victim_seqs](const cachemgr::SeqResult& r) {
      return std::find(victim_seqs.begin(), victim_seqs.end(), r.seq.value) != victim_seqs.end();
    };
    // A copy-on-write copy of this plan dropped with the victim leaves its last block
    // unwritten: nothing there to swap out.
    const bool copied = std::any_of(copies->grants.begin(), copies->grants.end(),
                                    [&](const cachemgr::SeqResult& r) {
                                      return victims(r) && !r.copies.empty();
                                    });
    copies->grants.erase(std::remove_if(copies->grants.begin(), copies->grants.end(), victims),
                         copies->grants.end());
    retry.erase(std::remove_if(retry.begin(), retry.end(), drop), retry.end());
    state_->Preempt(victim, /*may_swap=*/!copied);
    want = std::move(retry);
  }
  return granted;
}

std::vector<Granted> StepPlanner::AdmitWaiting(int32_t* budget,
                                                        cachemgr::StepResponse* copies) {
  std::vector<Request*> candidates;
  const int32_t slots = state_->options().max_num_seqs - state_->RunningSeqs();
  int32_t used = 0;
  for (Request* r : state_->waiting) {
    if (used + r->width() > slots || static_cast<int32_t>(candidates.size()) >= *budget) break;
    candidates.push_back(r);
    used += r->width();
    if (admit_head_alone_) break;
  }
  admit_head_alone_ = false;
  if (candidates.empty()) return {};

  // First the root sequences, with their prefix lookups; their cached tokens decide the
  // chunks. A group's root looks up the prompt only: its other branches fork from it at
  // the end of the prompt.
  cachemgr::StepRequest create;
  for (Request* r : candidates) {
    const Branch& root = r->branches[0];
    const SchedulerOptions& options = state_->options();
    cachemgr::CreateOp op{.seq = SeqId{state_->NewSeqId()},
                          .max_len = options.reserve_max_model_len ? options.max_model_len
                                                                   : r->max_len,
                          .request_id = r->spec.request_id};
    const int32_t lookup =
        r->branches.size() > 1 ? r->prompt_len() : root.num_tokens(r->spec.prompt);
    for (int32_t i = 0; i < lookup; ++i) op.prompt.push_back(root.TokenAt(r->spec.prompt, i));
    create.creates.push_back(std::move(op));
  }
  absl::StatusOr<cachemgr::StepResponse> created = state_->CacheStep(std::move(create));
  if (!created.ok()) {
    FailCache(created.status());
    return {};
  }
  std::vector<Request*> admitted;
  bool refused = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cachemgr::SeqResult& res = created->creates[i];
    refused = refused || res.status != SeqStatus::kOk;
    if (refused) {
      // Keep arrival order: once one waits, the later ones wait too.
      if (res.status == SeqStatus::kOk) state_->pending_frees.push_back(res.seq);
      continue;
    }
    Request* r = candidates[i];
    Branch& root = r->branches[0];
    root.draft.clear();
    root.seq_id = res.seq.value;
    root.num_computed = res.num_cached_tokens;
    RequestState::ApplyTable(&root, res);
    admitted.push_back(r);
  }

  cachemgr::StepRequest grant;
  std::vector<Granted> want;
  for (Request* r : admitted) {
    const int32_t n = std::min(Wanted(*r, 0), *budget);
    if (n <= 0) break;
    const Branch& root = r->branches[0];
    cachemgr::GrantOp op{.seq = SeqId{root.seq_id}, .start_pos = root.num_computed};
    for (int32_t i = 0; i < n; ++i) {
      op.token_ids.push_back(root.TokenAt(r->spec.prompt, root.num_computed + i));
    }
    grant.grants.push_back(std::move(op));
    want.push_back({r, 0, n});
    *budget -= n;
  }
  absl::StatusOr<cachemgr::StepResponse> granted_resp = state_->CacheStep(std::move(grant));
  if (!granted_resp.ok()) {
    FailCache(granted_resp.status());
    return {};
  }
  std::vector<Granted> granted;
  size_t first_refused = admitted.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const cachemgr::SeqResult& res = granted_resp->grants[i];
    if (res.status != SeqStatus::kOk || first_refused < admitted.size()) {
      first_refused = std::min(first_refused, i);
      continue;
    }
    RequestState::ApplyTable(&want[i].request->branches[0], res);
    copies->grants.push_back(res);
    granted.push_back(want[i]);
  }
  // The head was refused while later candidates held cached blocks their prefix lookups
  // attached: next time the head is looked up alone, or those lookups could starve it
  // for ever (the same candidates, the same blocks, every iteration).
  if (first_refused == 0 && admitted.size() > 1) admit_head_alone_ = true;
  // Requests past the first refusal go back to waiting, their sequences freed.
  for (size_t i = first_refused; i < admitted.size(); ++i) {
    Branch& root = admitted[i]->branches[0];
    state_->pending_frees.push_back(SeqId{root.seq_id});
    root.seq_id = 0;
    root.block_table.clear();
    root.window_tables.clear();
    root.num_computed = 0;
  }
  admitted.resize(first_refused);
  for (Request* r : admitted) {
    state_->MarkRunning(r);
    const int32_t cached = r->branches[0].num_computed;
    if (r->first_admission) {
      r->first_admission = false;
      r->num_cached_prompt_tokens = cached;
      state_->stats.prompt_tokens += static_cast<int64_t>(r->spec.prompt.size());
      state_->metrics().prompt_tokens.Increment(static_cast<double>(r->spec.prompt.size()));
    }
    state_->stats.prefix_cache_hit_tokens += cached;
    state_->metrics().prefix_hits.Increment(cached);
  }
  return granted;
}

worker::SequenceStep StepPlanner::MakeStep(const Request& r, const Granted& g) const {
  const Branch& b = r.branches[g.branch];
  worker::SequenceStep s;
  s.seq_id = b.seq_id;
  s.start_pos = b.num_computed;
  for (int32_t i = 0; i < g.num_tokens; ++i) {
    s.token_ids.push_back(b.TokenAt(r.spec.prompt, b.num_computed + i));
  }
  s.block_table = b.block_table;
  s.window_tables = b.window_tables;
  s.decode_from_pos = r.prompt_len();  // the sampled tokens attend as they were decoded
  s.sampling = r.spec.sampling;
  s.num_logprobs = r.spec.num_logprobs;
  const int32_t k = static_cast<int32_t>(b.draft.size());
  const bool at_end = b.num_computed + g.num_tokens == b.num_tokens(r.spec.prompt) + k;
  CHECK(k == 0 || at_end) << "sequence " << b.seq_id << " carries proposals but not to its end";
  s.num_samples = 0;
  if (!at_end) return s;
  if (r.beam()) {
    s.num_candidates = 2 * r.spec.beam_width;
    s.num_logprobs = 0;
  } else if (!r.fanned_out) {
    s.num_samples = r.spec.n;  // the first token of every sample, from the shared prompt
    s.first_sample_index = 0;
  } else {
    s.num_samples = 1;
    s.first_sample_index = b.index;
  }
  if (k > 0) {
    s.num_draft_tokens = k;
    const SpeculativeOptions& o = state_->options().speculative;
    s.draft_by_model = o.mode == SpeculativeMode::kDraft;
    if (s.draft_by_model) {  // the workers see the known token where the placeholders stand
      std::fill(s.token_ids.end() - k, s.token_ids.end(), *(s.token_ids.end() - k - 1));
    }
    if (o.synth_len > 0.0) {
      s.synthetic_accepts = SyntheticAccepts(SyntheticRate(o.synth_len, k), k,
                                             (b.seq_id << 24) ^ static_cast<uint64_t>(s.start_pos));
    }
  }
  // The whole history, from the request's own record, on every sampling step.
  if (UsesTokenHistory(r.spec)) {
    s.history = MakeTokenHistory(r.spec, r.prompt_token_set, b.output, state_->options().eos_id);
  }
  // Structured output: the mask the branch's matcher left after its last token.
  if (b.matcher.has_value()) s.history.allowed_token_bitmask = b.mask;
  return s;
}

}  // namespace folio::scheduler
