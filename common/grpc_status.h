// Conversions between absl::Status and grpc::Status. The codes are numbered alike; this
// is the one place that maps them. An absl::Status's payloads (absl::Status::SetPayload)
// travel in the gRPC status's binary details, as folio.internal.v1.RpcStatus (laid out
// as google.rpc.Status), each under its type URL, and come back as payloads: a service
// can say more than a message in a failure, in a form the caller reads without parsing
// text. Details that do not parse are ignored (the code and message stand). Thread-safe.
#ifndef FOLIO_COMMON_GRPC_STATUS_H_
#define FOLIO_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace folio {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace folio

#endif  // FOLIO_COMMON_GRPC_STATUS_H_
