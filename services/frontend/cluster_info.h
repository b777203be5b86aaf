// What the frontend knows about the model replica behind it: the scheduler's ClusterInfo,
// the Tokenizer built from its TokenizerSpec, and the RequestValidator for its limits.
// Plus FetchClusterInfo, the start-up loop that asks the scheduler until it answers.
//
// ModelContext is immutable once built and shared (shared_ptr<const>) by every call in
// flight; thread-safe. It is neither copyable nor movable: the validator refers to the
// tokenizer beside it.
#ifndef FOLIO_SERVICES_FRONTEND_CLUSTER_INFO_H_
#define FOLIO_SERVICES_FRONTEND_CLUSTER_INFO_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "common/tokenizer_spec.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/channel.h"
#include "services/frontend/request_validator.h"

namespace folio::frontend {

class ModelContext {
 public:
  // Builds the tokenizer from info.tokenizer() and a validator for info.max_model_len().
  // InvalidArgument when the TokenizerSpec is not a valid vocabulary or max_model_len <= 0.
  static absl::StatusOr<std::shared_ptr<const ModelContext>> Create(
      folio::internal::v1::ClusterInfo info, ValidatorOptions validator_options);

  ModelContext(const ModelContext&) = delete;
  ModelContext& operator=(const ModelContext&) = delete;

  const folio::internal::v1::ClusterInfo& info() const { return info_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const RequestValidator& validator() const { return validator_; }

 private:
  ModelContext(folio::internal::v1::ClusterInfo info, Tokenizer tokenizer,
               ValidatorOptions validator_options);

  const folio::internal::v1::ClusterInfo info_;
  const Tokenizer tokenizer_;
  const RequestValidator validator_;
};

using ::folio::VocabFromSpec;  // common/tokenizer_spec.h

// A channel to the scheduler at `target` (HOST:PORT) whose reconnect backoff is capped at
// `max_reconnect_backoff`, so a frontend that started first finds a scheduler that comes
// up later within seconds (gRPC's default cap is two minutes). `tls` (common/tls.h) must
// have been checked (TlsConfigFromFlagsOrExit): unreadable files are a CHECK failure.
std::shared_ptr<grpc::Channel> MakeSchedulerChannel(
    const std::string& target, absl::Duration max_reconnect_backoff = absl::Seconds(2),
    const TlsConfig& tls = TlsConfig());

struct FetchOptions {
  std::string target;                                 // scheduler address, for log messages
  absl::Duration timeout = absl::Seconds(300);        // give up after this long
  absl::Duration attempt_timeout = absl::Seconds(2);  // deadline of each GetClusterInfo
  absl::Duration retry_delay = absl::Milliseconds(500);
  absl::Duration log_every = absl::Seconds(5);  // progress log interval
};

// Calls GetClusterInfo until it succeeds, logging progress every options.log_every.
// Blocking; call it from main or a start-up thread, never from a gRPC callback.
// DeadlineExceeded (with the last error) after options.timeout; Cancelled as soon as
// `*stop` (may be null) becomes true.
absl::StatusOr<folio::internal::v1::ClusterInfo> FetchClusterInfo(
    folio::internal::v1::Scheduler::StubInterface* stub, const FetchOptions& options,
    const std::atomic<bool>* stop);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CLUSTER_INFO_H_
