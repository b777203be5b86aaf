// folio-bench over Folio's gRPC API: folio.v1.TextGeneration/GetModelInfo for the model's
// facts, streaming Generate per request.
#ifndef FOLIO_TOOLS_BENCH_GRPC_CLIENT_H_
#define FOLIO_TOOLS_BENCH_GRPC_CLIENT_H_

#include <memory>
#include <string>

#include "folio/v1/folio.grpc.pb.h"
#include "tools/bench/backend.h"

namespace folio::bench {

class GrpcBackend : public Backend {
 public:
  explicit GrpcBackend(std::string server);  // HOST:PORT of folio-frontend

  absl::StatusOr<ModelFacts> Connect() override;
  absl::Status CanSend(const BenchRequest& request) const override;
  void Run(const BenchRequest& request, std::optional<Clock::time_point> deadline,
           RequestResult* out) override;

 private:
  const std::string server_;
  std::unique_ptr<folio::v1::TextGeneration::Stub> stub_;
};

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_GRPC_CLIENT_H_
