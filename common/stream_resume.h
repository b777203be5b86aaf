// What tells a frontend whether a scheduler stream that failed may be resumed.
//
// A frontend resumes a Generate stream that broke with UNAVAILABLE (the scheduler died,
// restarted, or was replaced) by submitting a continuation to whichever scheduler serves
// next (scheduler.proto, Continuation). Some UNAVAILABLE errors are the scheduler's own
// final word, though: its replica stayed lost past --recovery_timeout_ms, and resuming
// would only wait that long again. The scheduler marks those with the trailing metadata
// key kFinalErrorTrailer; the frontend does not resume a stream that carries it.
//
// Inside the scheduler, an error status with the kResumablePayload payload (MarkResumable)
// is one a frontend should resume (this scheduler was fenced by a newer one): it goes out
// without the trailer.
#ifndef FOLIO_COMMON_STREAM_RESUME_H_
#define FOLIO_COMMON_STREAM_RESUME_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace folio {

inline constexpr char kFinalErrorTrailer[] = "folio-final";
inline constexpr char kResumablePayload[] = "folio.resumable";

inline absl::Status MarkResumable(absl::Status status) {
  status.SetPayload(kResumablePayload, absl::Cord("1"));
  return status;
}

inline bool IsResumable(const absl::Status& status) {
  return status.GetPayload(kResumablePayload).has_value();
}

}  // namespace folio

#endif  // FOLIO_COMMON_STREAM_RESUME_H_
