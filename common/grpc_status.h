// Conversions between absl::Status and grpc::Status. The codes are numbered alike; this
// is the one place that maps them. Thread-safe.
#ifndef FOLIO_COMMON_GRPC_STATUS_H_
#define FOLIO_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace folio {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace folio

#endif  // FOLIO_COMMON_GRPC_STATUS_H_
