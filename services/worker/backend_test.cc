// --device: the CPU default, refusals with a reason, and on a CUDA machine the factory the
// service uses, end to end: a pool of exactly the requested blocks and the golden text.
#include "services/worker/backend.h"

#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/engine/test_models.h"

#ifdef FOLIO_HAVE_CUDA
#include "services/worker/cuda/cuda_model_runner.h"
#endif

namespace folio::worker {
namespace {

TEST(BackendTest, CpuIsTheDefaultFactory) {
  absl::StatusOr<RunnerFactory> f = MakeRunnerFactory(BackendOptions{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(static_cast<bool>(*f)) << "the CPU backend is the service's default";
}

TEST(BackendTest, UnknownDeviceIsRefused) {
  BackendOptions b;
  b.device = "tpu";
  const absl::Status s = MakeRunnerFactory(b).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cpu or cuda"), std::string::npos) << s;
}

TEST(BackendTest, CudaRefusalsSayWhy) {
  BackendOptions b;
  b.device = "cuda";
  if (!HaveCudaBackend()) {
    const absl::Status s = MakeRunnerFactory(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("built without the CUDA backend"), std::string::npos) << s;
    return;
  }
  b.tp_size = 2;
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.tp_size = 1;
  b.kv_dtype = kernels::KvDType::kF32;
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.kv_dtype = kernels::KvDType::kF16;
  b.dtype = "f8";
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
}

#ifdef FOLIO_HAVE_CUDA
bool HaveDevice(std::string* why) { return cuda::CudaDeviceCount(why) > 0; }
#else
bool HaveDevice(std::string* why) {
  *why = "built without the CUDA backend";
  return false;
}
#endif

TEST(BackendTest, CudaWithoutADeviceFailsAtStartUp) {
  std::string why;
  if (!HaveCudaBackend() || HaveDevice(&why)) {
    GTEST_SKIP() << "needs a CUDA build on a machine without a device";
  }
  BackendOptions b;
  b.device = "cuda";
  const absl::Status s = MakeRunnerFactory(b).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s;
}

// The factory as the service calls it at AllocateKvCache: exactly num_blocks blocks, and
// stories260K's golden text through the runner it builds.
TEST(BackendTest, CudaFactoryBuildsTheRequestedPoolAndRunsTheGoldenText) {
  std::string why;
  if (!HaveDevice(&why)) GTEST_SKIP() << "no CUDA device on this machine (" << why << ")";
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/stories260K/stories260K.bin");
  BackendOptions b;
  b.device = "cuda";
  b.dtype = "f32";
  b.max_num_batched_tokens = 512;
  b.max_num_seqs = 32;
  absl::StatusOr<RunnerFactory> factory = MakeRunnerFactory(b);
  ASSERT_TRUE(factory.ok()) << factory.status();
  const ModelConfig& c = weights->config;
  RunnerRequest request;
  request.num_blocks = 64;
  request.block_size = 16;
  request.kv_cache_bytes = int64_t{64} * 2 * c.num_layers * 16 * c.num_kv_heads * c.head_dim * 2;
  absl::StatusOr<RunnerResources> r = (*factory)(*weights, request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->runner->num_blocks(), 64);
  EXPECT_EQ(r->kv_cache_bytes, request.kv_cache_bytes);
  EXPECT_GT(r->layer_weight_bytes, 0);
  EXPECT_LT(r->layer_weight_bytes, r->weight_bytes);

  const std::string expected =
      testing::ReadFileOrEmpty(*dir + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(weights->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> ids =
      testing::GreedyFromBos(*r->runner, tokenizer->bos_id(), /*steps=*/200, /*table_seed=*/9);
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

}  // namespace
}  // namespace folio::worker
