// --device: the CPU default, refusals with a reason, and on a CUDA machine the factory the
// service uses, end to end: a pool of exactly the requested blocks and the golden text.
#include "services/worker/backend.h"

#include <algorithm>
#include <memory>
#include <optional>
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
  b.cuda_collectives = "mpi";
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.cuda_collectives = "nccl";
  b.kv_dtype = kernels::KvDType::kF32;
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.kv_dtype = kernels::KvDType::kF16;
  b.dtype = "f8";
  EXPECT_EQ(MakeRunnerFactory(b).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackendTest, GpuMemoryUtilizationOutsideZeroToOneIsRefusedInAnyBuild) {
  BackendOptions b;
  b.device = "cuda";
  for (double u : {0.0, -0.5, 1.01}) {
    b.gpu_memory_utilization = u;
    const absl::Status s = MakeRunnerFactory(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << u;
    EXPECT_NE(s.message().find("--gpu_memory_utilization"), std::string::npos) << s;
  }
}

TEST(BackendTest, TheCpuBudgetIsAFlagNotAMeasurement) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/stories260K/stories260K.bin");
  const absl::Status s = MeasureKvBudget(*weights, BackendOptions{}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--kv_cache_bytes"), std::string::npos) << s;
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

// The start-up budget follows the utilization rule: lowering --gpu_memory_utilization by
// 0.4 lowers the budget by 0.4 of the device (what else is in use stays the same), and the
// pool the scheduler then allocates from that budget builds.
TEST(BackendTest, MeasuredBudgetFollowsGpuMemoryUtilization) {
  std::string why;
  if (!HaveDevice(&why)) GTEST_SKIP() << "no CUDA device on this machine (" << why << ")";
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/stories260K/stories260K.bin");
  BackendOptions b;
  b.device = "cuda";
  b.max_num_batched_tokens = 512;
  b.max_num_seqs = 32;
  b.gpu_memory_utilization = 0.9;
  absl::StatusOr<int64_t> high = MeasureKvBudget(*weights, b);
  ASSERT_TRUE(high.ok()) << high.status();
  b.gpu_memory_utilization = 0.5;
  absl::StatusOr<int64_t> low = MeasureKvBudget(*weights, b);
  ASSERT_TRUE(low.ok()) << low.status();
  ASSERT_GT(*low, 0);
  int64_t total = 0;
#ifdef FOLIO_HAVE_CUDA
  {
    cuda::CudaModelRunnerOptions o;
    o.kv_cache_bytes = int64_t{1} << 20;
    o.max_num_batched_tokens = 64;
    o.max_num_seqs = 4;
    absl::StatusOr<std::unique_ptr<cuda::CudaModelRunner>> r = cuda::CudaModelRunner::Create(*weights, o);
    ASSERT_TRUE(r.ok()) << r.status();
    total = (*r)->memory().total_bytes;
  }
#endif
  ASSERT_GT(total, 0);
  EXPECT_LE(*high, static_cast<int64_t>(0.9 * static_cast<double>(total)));
  // Other processes may change the device's use between the two measurements; 1% slack.
  EXPECT_NEAR(static_cast<double>(*high - *low), 0.4 * static_cast<double>(total),
              0.01 * static_cast<double>(total));

  absl::StatusOr<RunnerFactory> factory = MakeRunnerFactory(b);
  ASSERT_TRUE(factory.ok()) << factory.status();
  const ModelConfig& c = weights->config;
  RunnerRequest request;
  request.block_size = 16;
  const int64_t block_bytes = int64_t{2} * c.num_layers * 16 * c.num_kv_heads * c.head_dim * 2;
  request.num_blocks = static_cast<int32_t>(std::min<int64_t>(*low / block_bytes, 1 << 20));
  request.kv_cache_bytes = request.num_blocks * block_bytes;
  absl::StatusOr<RunnerResources> r = (*factory)(*weights, request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->runner->num_blocks(), request.num_blocks);
}

}  // namespace
}  // namespace folio::worker
