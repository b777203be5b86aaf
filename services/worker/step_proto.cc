#include "services/worker/step_proto.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::worker {
namespace pb = folio::internal::v1;

pb::TokenizerSpec TokenizerSpecFromVocab(const Vocab& v) {
  pb::TokenizerSpec spec;
  pb::TokenizerSpec* tok = &spec;
  tok->mutable_pieces()->Reserve(v.size());
  for (const std::string& piece : v.pieces) tok->add_pieces(piece);
  const bool bpe = v.kind == TokenizerKind::kByteLevelBpe;
  // Byte-level BPE merges by rank; its scores are all zero and are not sent.
  if (!bpe) tok->mutable_scores()->Add(v.scores.begin(), v.scores.end());
  tok->mutable_types()->Reserve(static_cast<int>(v.types.size()));
  for (TokenType t : v.types) tok->add_types(static_cast<int32_t>(t));
  tok->set_bos_id(v.bos_id);
  tok->set_eos_id(v.eos_id);
  tok->set_unk_id(v.unk_id);
  tok->set_add_bos(v.add_bos);
  tok->set_add_dummy_prefix(v.add_dummy_prefix);
  tok->set_chat_template(v.chat_template);
  for (const auto& [name, source] : v.named_chat_templates) {
    (*tok->mutable_named_chat_templates())[name] = source;
  }
  tok->set_kind(bpe ? pb::TOKENIZER_KIND_BYTE_LEVEL_BPE : pb::TOKENIZER_KIND_SENTENCEPIECE);
  tok->mutable_eog_ids()->Add(v.eog_ids.begin(), v.eog_ids.end());
  tok->set_add_eos(v.add_eos);
  tok->mutable_rstrip_ids()->Add(v.rstrip_ids.begin(), v.rstrip_ids.end());
  tok->mutable_lstrip_ids()->Add(v.lstrip_ids.begin(), v.lstrip_ids.end());
  tok->set_normalizer(v.normalizer);
  // Byte-level BPE: the pre-tokenizer; SentencePiece: where the dummy prefix goes.
  tok->set_pre_tokenizer(v.pre_tokenizer);
  if (bpe) {
    tok->mutable_merges()->Reserve(static_cast<int>(2 * v.merges.size()));
    for (const auto& [left, right] : v.merges) {
      tok->add_merges(left);
      tok->add_merges(right);
    }
    tok->set_ignore_merges(v.ignore_merges);
  }
  return spec;
}

absl::StatusOr<NativeStep> StepFromProto(const pb::ExecuteStepRequest& request) {
  NativeStep out;
  for (const pb::BlockCopy& c : request.copies()) {
    out.input.block_copies.push_back(BlockCopy{.src_block = c.src(), .dst_block = c.dst()});
  }
  for (const pb::BlockTransfer& t : request.transfers()) {
    HostTransfer::Kind kind;
    switch (t.kind()) {
      case pb::BlockTransfer::STORE: kind = HostTransfer::Kind::kStore; break;
      case pb::BlockTransfer::LOAD: kind = HostTransfer::Kind::kLoad; break;
      case pb::BlockTransfer::SPILL: kind = HostTransfer::Kind::kSpill; break;
      case pb::BlockTransfer::LOAD_DISK: kind = HostTransfer::Kind::kLoadDisk; break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("transfer of unknown kind ", static_cast<int>(t.kind())));
    }
    out.input.host_transfers.push_back(HostTransfer{
        .kind = kind,
        .block = t.block(),
        .host_slot = t.host_slot(),
        .hash_hi = t.hash_hi(),
        .hash_lo = t.hash_lo(),
        .tokens = std::vector<int32_t>(t.tokens().begin(), t.tokens().end())});
  }
  out.input.seqs.reserve(request.sequences_size());
  for (int i = 0; i < request.sequences_size(); ++i) {
    const pb::StepSequence& in = request.sequences(i);
    SequenceStep seq;
    seq.seq_id = in.seq_id();
    seq.token_ids.assign(in.token_ids().begin(), in.token_ids().end());
    seq.start_pos = in.start_pos();
    seq.block_table.assign(in.block_table().begin(), in.block_table().end());
    for (const pb::WindowBlockTable& w : in.window_tables()) {
      seq.window_tables.push_back(
          WindowBlockTable{.first_block = w.first_block(),
                           .blocks = std::vector<int32_t>(w.blocks().begin(), w.blocks().end())});
    }
    const pb::SamplingParams& s = in.sampling();
    seq.sampling.temperature = s.temperature();
    seq.sampling.top_k = s.top_k();
    // top_p lies in (0, 1], so proto3's unset 0 can only mean "off".
    seq.sampling.top_p = s.top_p() == 0.0f ? 1.0f : s.top_p();
    seq.sampling.min_p = s.min_p();
    seq.sampling.seed = s.seed();
    seq.sampling.presence_penalty = s.presence_penalty();
    seq.sampling.frequency_penalty = s.frequency_penalty();
    // repetition_penalty must be > 0, so proto3's unset 0 can only mean "off" (1).
    seq.sampling.repetition_penalty = s.repetition_penalty() == 0.0f ? 1.0f : s.repetition_penalty();
    seq.sampling.logit_bias.reserve(s.logit_bias_size());
    for (const pb::LogitBias& b : s.logit_bias()) {
      seq.sampling.logit_bias.push_back(LogitBias{.token_id = b.token_id(), .bias = b.bias()});
    }
    if (in.has_history()) {
      const pb::TokenHistory& h = in.history();
      seq.history.prompt_token_ids.assign(h.prompt_token_ids().begin(), h.prompt_token_ids().end());
      seq.history.output_token_ids.assign(h.output_token_ids().begin(), h.output_token_ids().end());
      seq.history.output_counts.assign(h.output_counts().begin(), h.output_counts().end());
      seq.history.suppressed_token_ids.assign(h.suppressed_token_ids().begin(),
                                              h.suppressed_token_ids().end());
      seq.history.allowed_token_bitmask.assign(h.allowed_token_bitmask().begin(),
                                               h.allowed_token_bitmask().end());
    }
    seq.num_samples = in.num_samples();
    seq.num_logprobs = in.num_logprobs();
    seq.num_candidates = in.num_candidates();
    seq.num_draft_tokens = in.num_draft_tokens();
    if (in.has_synthetic_accepts()) {
      if (in.synthetic_accepts() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step sequence #", i, " (seq_id ", in.seq_id(), "): negative synthetic_accepts ",
            in.synthetic_accepts()));
      }
      seq.synthetic_accepts = in.synthetic_accepts();
    }
    seq.draft_by_model = in.draft_by_model();
    if (in.has_decode_from_pos()) {
      if (in.decode_from_pos() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step sequence #", i, " (seq_id ", in.seq_id(), "): negative decode_from_pos ",
            in.decode_from_pos()));
      }
      seq.decode_from_pos = in.decode_from_pos();
    }
    if (in.sample_index() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step sequence #", i, " (seq_id ", in.seq_id(), "): negative sample_index ",
                       in.sample_index()));
    }
    seq.first_sample_index = in.sample_index();
    out.input.seqs.push_back(std::move(seq));
  }
  return out;
}

void StepToProto(const StepOutput& output, const NativeStep& step,
                 pb::ExecuteStepResponse* response) {
  CHECK_EQ(output.seqs.size(), step.input.seqs.size()) << "the engine answers every sequence";
  response->mutable_outputs()->Reserve(static_cast<int>(output.seqs.size()));
  for (size_t i = 0; i < output.seqs.size(); ++i) {
    const SequenceOutput& in = output.seqs[i];
    pb::SequenceOutput* out = response->add_outputs();
    out->set_seq_id(in.seq_id);
    for (size_t s = 0; s < in.samples.size(); ++s) {
      const SampledToken& t = in.samples[s];
      pb::SampledToken* sample = out->add_samples();
      sample->set_token_id(t.token_id);
      sample->set_logprob(t.logprob);
      for (const TokenLogprob& lp : t.top_logprobs) {
        pb::TokenLogprob* top = sample->add_top_logprobs();
        top->set_token_id(lp.token_id);
        top->set_logprob(lp.logprob);
      }
    }
    for (const TokenLogprob& lp : in.candidates) {
      pb::TokenLogprob* c = out->add_candidates();
      c->set_token_id(lp.token_id);
      c->set_logprob(lp.logprob);
    }
  }
}

}  // namespace folio::worker
