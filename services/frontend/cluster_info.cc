#include "services/frontend/cluster_info.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace folio::frontend {
namespace pb = folio::internal::v1;

absl::StatusOr<std::shared_ptr<const ModelContext>> ModelContext::Create(
    pb::ClusterInfo info, ValidatorOptions validator_options) {
  if (info.max_model_len() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cluster info has max_model_len ",
                                                   info.max_model_len(), "; it must be positive"));
  }
  absl::StatusOr<Vocab> vocab = VocabFromSpec(info.tokenizer());
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*std::move(vocab));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the scheduler's tokenizer is invalid: ", tokenizer.status().message()));
  }
  validator_options.max_model_len = info.max_model_len();
  validator_options.max_n = std::max(info.max_n(), 1);
  validator_options.max_beam_width = std::max(info.max_beam_width(), 0);
  return std::shared_ptr<const ModelContext>(
      new ModelContext(std::move(info), *std::move(tokenizer), std::move(validator_options)));
}

ModelContext::ModelContext(pb::ClusterInfo info, Tokenizer tokenizer,
                           ValidatorOptions validator_options)
    : info_(std::move(info)),
      tokenizer_(std::move(tokenizer)),
      validator_(tokenizer_, std::move(validator_options)) {}

absl::StatusOr<Vocab> VocabFromSpec(const pb::TokenizerSpec& spec) {
  const bool bpe = spec.kind() == pb::TOKENIZER_KIND_BYTE_LEVEL_BPE;
  if (!bpe && spec.kind() != pb::TOKENIZER_KIND_SENTENCEPIECE) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer spec has unknown kind ", static_cast<int>(spec.kind())));
  }
  // Byte-level BPE specs carry no scores (it merges by rank).
  const bool scores_ok = spec.scores_size() == spec.pieces_size() ||
                         (bpe && spec.scores_size() == 0);
  if (!scores_ok || spec.types_size() != spec.pieces_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer spec has ", spec.pieces_size(), " pieces, ", spec.scores_size(),
                     " scores and ", spec.types_size(), " types; they must be equal"));
  }
  if (spec.merges_size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer spec has ", spec.merges_size(), " merge ids; they come in pairs"));
  }
  Vocab vocab;
  vocab.kind = bpe ? TokenizerKind::kByteLevelBpe : TokenizerKind::kSentencePiece;
  vocab.pieces.assign(spec.pieces().begin(), spec.pieces().end());
  if (spec.scores_size() == 0) {
    vocab.scores.assign(vocab.pieces.size(), 0.0f);
  } else {
    vocab.scores.assign(spec.scores().begin(), spec.scores().end());
  }
  vocab.types.reserve(spec.types_size());
  for (int i = 0; i < spec.types_size(); ++i) {
    const int32_t type = spec.types(i);
    if (type < static_cast<int32_t>(TokenType::kNormal) ||
        type > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer spec: token ", i, " has type ", type, "; must be 1..6"));
    }
    vocab.types.push_back(static_cast<TokenType>(type));
  }
  vocab.bos_id = spec.bos_id();
  vocab.eos_id = spec.eos_id();
  vocab.unk_id = spec.unk_id();
  vocab.add_bos = spec.add_bos();
  vocab.add_dummy_prefix = spec.add_dummy_prefix();
  vocab.add_eos = spec.add_eos();
  vocab.eog_ids.assign(spec.eog_ids().begin(), spec.eog_ids().end());
  vocab.rstrip_ids.assign(spec.rstrip_ids().begin(), spec.rstrip_ids().end());
  vocab.lstrip_ids.assign(spec.lstrip_ids().begin(), spec.lstrip_ids().end());
  vocab.normalizer = spec.normalizer();
  vocab.merges.reserve(spec.merges_size() / 2);
  for (int i = 0; i + 1 < spec.merges_size(); i += 2) {
    vocab.merges.emplace_back(spec.merges(i), spec.merges(i + 1));
  }
  if (bpe) vocab.pre_tokenizer = spec.pre_tokenizer();
  vocab.ignore_merges = spec.ignore_merges();
  vocab.chat_template = spec.chat_template();
  return vocab;
}

std::shared_ptr<grpc::Channel> MakeSchedulerChannel(const std::string& target,
                                                    absl::Duration max_reconnect_backoff,
                                                    const TlsConfig& tls) {
  grpc::ChannelArguments args;
  const int max_ms = static_cast<int>(absl::ToInt64Milliseconds(max_reconnect_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(max_ms, 250));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(max_ms, 250));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetMaxReceiveMessageSize(64 << 20);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(target, tls, args);
  CHECK(channel.ok()) << channel.status();
  return *std::move(channel);
}

absl::StatusOr<pb::ClusterInfo> FetchClusterInfo(pb::Scheduler::StubInterface* stub,
                                                 const FetchOptions& options,
                                                 const std::atomic<bool>* stop) {
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + options.timeout;
  absl::Time next_log = start + options.log_every;
  absl::Status last_error = absl::UnavailableError("no attempt made");
  for (int attempt = 1;; ++attempt) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError("stopped while waiting for the scheduler");
    }
    const absl::Time now = absl::Now();
    if (now >= give_up && attempt > 1) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the scheduler at ", options.target, " did not answer GetClusterInfo within ",
          absl::FormatDuration(options.timeout), " (", attempt - 1,
          " attempts); last error: ", last_error.ToString()));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::min(give_up, now + options.attempt_timeout)));
    pb::ClusterInfo info;
    const grpc::Status status = stub->GetClusterInfo(&ctx, pb::GetClusterInfoRequest(), &info);
    if (status.ok()) {
      LOG(INFO) << "scheduler at " << options.target << " answered after " << attempt
                << " attempt(s): model " << info.model().name() << ", vocab "
                << info.tokenizer().pieces_size() << ", max_model_len " << info.max_model_len();
      return info;
    }
    last_error = FromGrpcStatus(status);
    if (absl::Now() >= next_log || attempt == 1) {
      LOG(INFO) << "waiting for the scheduler at " << options.target << " ("
                << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Seconds(1)))
                << " so far, giving up after " << absl::FormatDuration(options.timeout)
                << "): " << last_error;
      next_log = absl::Now() + options.log_every;
    }
    // Sleep in short slices so a stop request is seen promptly.
    const absl::Time wake = std::min(give_up, absl::Now() + options.retry_delay);
    while (absl::Now() < wake && (stop == nullptr || !stop->load())) {
      absl::SleepFor(std::min(absl::Milliseconds(50), wake - absl::Now()));
    }
  }
}

}  // namespace folio::frontend
