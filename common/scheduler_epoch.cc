#include "common/scheduler_epoch.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio {

constexpr char kFencedPrefix[] = "fenced: ";

absl::Status EpochFence::Admit(uint64_t epoch, absl::string_view what) {
  if (epoch == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (epoch < current_) {
    return absl::FailedPreconditionError(absl::StrCat(
        kFencedPrefix, what, " from scheduler epoch ", epoch, " refused: ", service_,
        " belongs to a newer scheduler (epoch ", current_, ")"));
  }
  if (epoch > current_) {
    LOG(INFO) << service_ << ": scheduler epoch " << epoch << " takes over"
              << (current_ == 0 ? std::string() : absl::StrCat(" from epoch ", current_))
              << " (" << what << ")";
    current_ = epoch;
  }
  return absl::OkStatus();
}

uint64_t EpochFence::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

uint64_t NewSchedulerEpoch(uint64_t newest_seen, absl::Time now) {
  const int64_t micros = absl::ToUnixMicros(now);
  const uint64_t clock = micros > 0 ? static_cast<uint64_t>(micros) : 1;
  return clock > newest_seen ? clock : newest_seen + 1;
}

bool IsFenced(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(status.message(), kFencedPrefix);
}

}  // namespace folio
