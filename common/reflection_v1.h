// gRPC server reflection v1 (grpc.reflection.v1.ServerReflection), beside the v1alpha
// service Debian's gRPC (1.51) provides, which lacks v1: grpcurl and grpcio-reflection ask
// for v1 first. Enabled for every server built after EnableReflectionV1() (a ServerBuilder
// plugin, as gRPC's own reflection is, so it learns the names of the services the server
// registered). Answers from the process's generated descriptor pool.
#ifndef FOLIO_COMMON_REFLECTION_V1_H_
#define FOLIO_COMMON_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace folio {

// Registers the plugin factory; idempotent. Call before building a server.
void EnableReflectionV1();

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the fully qualified names of the server's services (set once, before it
  // serves).
  void SetServiceList(const std::vector<std::string>* services) { services_ = services; }

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

  // One request's answer; `sent` holds the files this stream already sent (each goes once).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request,
      std::vector<std::string>* sent) const;

 private:
  const std::vector<std::string>* services_ = nullptr;
};

}  // namespace folio

#endif  // FOLIO_COMMON_REFLECTION_V1_H_
