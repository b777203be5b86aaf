// The fixture of the served-model tests (see served_model_test_env.h).
#include "tests/served_model_test_env.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"

namespace folio::testing {

namespace v1 = folio::v1;

void ServedModelTest::SetUp() {
  const char* base = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = (std::filesystem::path(base != nullptr ? base : "/tmp") /
          absl::StrCat("folio-", test->test_suite_name(), "-", test->name(), "-", ::getpid()))
             .string();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
}

void ServedModelTest::TearDown() { std::filesystem::remove_all(dir_); }

absl::StatusOr<std::unique_ptr<Cluster>> ServedModelTest::Serve(
    const std::string& model, const std::vector<std::string>& worker_args,
    const std::vector<std::string>& scheduler_args) {
  ClusterOptions options;
  options.model = model;
  options.worker_args = {"--kv_cache_bytes=16MiB", "--num_threads=1"};
  options.worker_args.insert(options.worker_args.end(), worker_args.begin(), worker_args.end());
  options.scheduler_args = scheduler_args;
  return Cluster::Start(options);
}

absl::StatusOr<v1::ModelInfo> ServedModelTest::ModelInfo(Cluster& cluster) {
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  grpc::Status s = cluster.frontend().GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!s.ok()) return absl::InternalError(absl::StrCat("GetModelInfo: ", s.error_message()));
  return info;
}

grpc::Status ServedModelTest::Complete(Cluster& cluster, const v1::GenerateRequest& request,
                                       v1::CompleteResponse* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return cluster.frontend().Complete(&ctx, request, response);
}

}  // namespace folio::testing
