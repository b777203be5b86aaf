// Test-only: ServedModelTest, the gtest fixture of the tests that write a model (a GGUF
// file or a Hugging Face folder) and serve it with a whole local cluster (tests/cluster.h):
// hf_serving_test.cc and quantized_serving_test.cc. It owns a scratch folder for the model
// files ($TEST_TMPDIR, else /tmp; one per test and process, removed after the test), starts
// the cluster with a small KV cache and one worker thread, and asks it over gRPC.
// Thread-compatible (one test at a time).
#ifndef FOLIO_TESTS_SERVED_MODEL_TEST_ENV_H_
#define FOLIO_TESTS_SERVED_MODEL_TEST_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "folio/v1/folio.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"

namespace folio::testing {

class ServedModelTest : public ::testing::Test {
 protected:
  void SetUp() override;     // an empty dir_
  void TearDown() override;  // removes dir_

  // A whole cluster serving `model` (a file or a folder) with a 16 MiB KV cache and one
  // worker thread.
  // `worker_args` and `scheduler_args` are added to those services' flags (a later
  // --kv_cache_bytes replaces the 16 MiB).
  static absl::StatusOr<std::unique_ptr<Cluster>> Serve(
      const std::string& model, const std::vector<std::string>& worker_args = {},
      const std::vector<std::string>& scheduler_args = {});
  // The frontend's GetModelInfo.
  static absl::StatusOr<folio::v1::ModelInfo> ModelInfo(Cluster& cluster);
  // Complete on the frontend with a 60 s deadline.
  static grpc::Status Complete(Cluster& cluster, const folio::v1::GenerateRequest& request,
                               folio::v1::CompleteResponse* response);

  std::string dir_;  // the test's scratch folder
};

}  // namespace folio::testing

#endif  // FOLIO_TESTS_SERVED_MODEL_TEST_ENV_H_
