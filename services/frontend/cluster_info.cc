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
