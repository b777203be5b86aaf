#include "common/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "folio/internal/v1/status.pb.h"

namespace folio {

namespace pb = ::folio::internal::v1;

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  pb::RpcStatus details;
  status.ForEachPayload([&details](absl::string_view type_url, const absl::Cord& value) {
    pb::RpcStatusDetail* d = details.add_details();
    d->set_type_url(std::string(type_url));
    d->set_value(std::string(value));
  });
  if (details.details_size() == 0) return grpc::Status(code, std::string(status.message()));
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(std::string(status.message()));
  return grpc::Status(code, std::string(status.message()), details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  pb::RpcStatus details;
  if (!status.error_details().empty() && details.ParseFromString(status.error_details())) {
    for (const pb::RpcStatusDetail& d : details.details()) {
      if (!d.type_url().empty()) out.SetPayload(d.type_url(), absl::Cord(d.value()));
    }
  }
  return out;
}

}  // namespace folio
