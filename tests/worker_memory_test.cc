// folio-worker's resident memory with weights kept as stored: serving an F16, a BF16, a
// Q8_0, a Q4_0 and a Q4_K_M model (random weights, Llama 3-shaped, ~300 MB in f16; the others
// converted by llama.cpp's quantizer), the worker's VmRSS and its peak VmHWM (the load
// of the weights included) stay within model file + KV pool + max(10% of the file,
// 256 MiB), read from /proc/<pid>/status after a prefill and a few decode steps, and its
// folio_worker_resident_bytes / _peak_bytes / _limit_bytes metrics say the same.
// Widening the weights to f32 (2x the f16 file, 7x the Q4_K_M one) or keeping repacked
// panels beside the file pages they came from would exceed it: the F16 file's
// projections are packed into f16 panels, and packing them all before releasing any
// file page peaked at file + panels, about 2x the file (VmHWM 628 MiB against a 559 MiB
// bound; 396 MiB when each matrix's pages go as soon as it is packed).
//
// A Hugging Face checkpoint folder of the same shape in BF16 (three safetensors shards)
// is held to the same bound, the file being the shards together.
//
// FOLIO_MEMORY_TEST_MODEL=<file or folder> adds that model (ModelFromEnvironment; skipped
// without it), e.g. the 1.1B files of bench/decode_1b_bench.cc.
//
// Needs FOLIO_BUILD_DIR (set by ctest); the quantized and BF16 cases need the llama.cpp
// reference (its quantizer writes them).
#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "services/worker/model/random_hf_model.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"
#include "tests/service_process.h"

namespace folio {
namespace {

namespace pb = folio::internal::v1;
using testing::ServiceProcess;

constexpr int kBlockSize = 16;
constexpr int kBlocks = 64;

std::string ModelDir() {
  const char* build = std::getenv("FOLIO_BUILD_DIR");
  const std::string dir =
      (build != nullptr ? std::string(build) + "/test-tmp" : ::testing::TempDir()) +
      "/worker_memory_test";
  std::filesystem::create_directories(dir);
  return dir;
}

// Llama 3-shaped: tied embeddings over a 32K vocabulary, rope_freqs, GQA 4:1.
std::string F16Model() {
  const std::string path = ModelDir() + "/llama3-300m-v1-F16.gguf";
  if (std::filesystem::exists(path)) return path;
  worker::RandomModelOptions o;
  o.name = "memory-test-llama3";
  o.dtype = worker::DType::kF16;
  o.dim = 1024;
  o.hidden_dim = 4096;
  o.num_layers = 8;
  o.num_heads = 16;
  o.num_kv_heads = 4;
  o.vocab_size = 32000;
  o.context_length = 1024;
  o.rope_theta = 500000.0f;
  o.rope_freqs = true;
  o.tied_embeddings = true;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  absl::Status s = worker::WriteRandomModel(o, tmp);
  if (!s.ok()) {
    ADD_FAILURE() << s;
    return "";
  }
  std::filesystem::rename(tmp, path);
  return path;
}

// A "VmRSS" / "VmHWM" (peak) line of /proc/<pid>/status in bytes; -1 if missing.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  const std::string prefix = field + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return -1;
}

double MetricValue(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return -1;
  return std::stod(m[1]);
}

// The same shape as a Hugging Face folder: BF16, three shards.
std::string HfFolder() {
  const std::string path = ModelDir() + "/llama3-300m-v1-hf-bf16";
  if (std::filesystem::exists(path)) return path;
  worker::RandomHfOptions o;
  o.dtype = worker::DType::kBF16;
  o.dim = 1024;
  o.hidden_dim = 4096;
  o.num_layers = 8;
  o.num_heads = 16;
  o.num_kv_heads = 4;
  o.vocab_size = 32000;
  o.context_length = 1024;
  o.rope_theta = 500000.0f;
  o.tied_embeddings = true;
  o.num_shards = 3;
  o.rope_scaling_json = R"({"rope_type": "llama3", "factor": 8.0})";
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  absl::Status s = worker::WriteRandomHfCheckpoint(o, tmp);
  if (!s.ok()) {
    ADD_FAILURE() << s;
    return "";
  }
  std::filesystem::rename(tmp, path);
  return path;
}

// The bytes the worker maps: the file, or a folder's safetensors files.
int64_t ModelBytes(const std::string& model) {
  if (!std::filesystem::is_directory(model)) {
    return static_cast<int64_t>(std::filesystem::file_size(model));
  }
  int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(model)) {
    if (e.path().extension() == ".safetensors") n += static_cast<int64_t>(e.file_size());
  }
  return n;
}

void ExpectWithinBound(const std::string& model) {
  ASSERT_FALSE(model.empty());
  const int64_t file_bytes = ModelBytes(model);
  auto proc = ServiceProcess::Start("folio-worker", {"--model=" + model, "--kv_cache_bytes=64MiB",
                                                     "--num_threads=2"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  auto stub = pb::Worker::NewStub(
      grpc::CreateChannel((*proc)->address(), grpc::InsecureChannelCredentials()));
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    return c;
  };
  pb::AllocateKvCacheRequest alloc;
  alloc.set_num_blocks(kBlocks);
  alloc.set_block_size(kBlockSize);
  pb::AllocateKvCacheResponse alloc_resp;
  grpc::Status s = stub->AllocateKvCache(ctx().get(), alloc, &alloc_resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const int64_t kv_bytes = alloc_resp.kv_cache_bytes();

  // A 48-token prefill, then 4 decode steps: every weight read, activations allocated.
  // 48 rows reach --dequant_gemm_min_rows (32) and --onednn_min_rows (8), so the quantized
  // and BF16 files' prefill runs oneDNN and its buffers count too.
  pb::ExecuteStepRequest step;
  pb::StepSequence* seq = step.add_sequences();
  seq->set_seq_id(1);
  seq->set_request_id("memory");
  for (int i = 0; i < 48; ++i) seq->add_token_ids(1 + (i * 97) % 31000);
  for (int b = 0; b < 4; ++b) seq->add_block_table(b);
  seq->mutable_sampling()->set_temperature(0.0f);
  seq->set_num_samples(1);
  int32_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    step.set_step_id(absl::StrCat("step-", i));
    seq->set_start_pos(pos);
    pb::ExecuteStepResponse resp;
    s = stub->ExecuteStep(ctx().get(), step, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    pos += seq->token_ids_size();
    const int32_t next = resp.outputs(0).samples(0).token_id();
    seq->clear_token_ids();
    seq->add_token_ids(next);
  }

  const int64_t rss = StatusBytes((*proc)->pid(), "VmRSS");
  // The peak since the process started: the weights' load (panels packed from the
  // mapping) included, not just the steady state after it.
  const int64_t peak = StatusBytes((*proc)->pid(), "VmHWM");
  const int64_t allowance = std::max<int64_t>(file_bytes / 10, int64_t{256} << 20);
  const int64_t limit = file_bytes + kv_bytes + allowance;
  EXPECT_GT(rss, 0);
  EXPECT_GE(peak, rss);
  EXPECT_LE(rss, limit) << model << ": VmRSS " << (rss >> 20) << " MiB, file "
                        << (file_bytes >> 20) << " MiB, KV " << (kv_bytes >> 20) << " MiB";
  EXPECT_LE(peak, limit) << model << ": peak VmHWM " << (peak >> 20) << " MiB, file "
                         << (file_bytes >> 20) << " MiB, KV " << (kv_bytes >> 20) << " MiB";
  std::cout << model << ": VmRSS " << (rss >> 20) << " MiB, peak VmHWM " << (peak >> 20)
            << " MiB; limit " << (limit >> 20) << " MiB (file " << (file_bytes >> 20)
            << " + KV " << (kv_bytes >> 20) << " + allowance " << (allowance >> 20) << ")\n";
  const std::string metrics = testing::HttpGet((*proc)->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(metrics, "folio_worker_model_file_bytes"), file_bytes);
  EXPECT_EQ(MetricValue(metrics, "folio_worker_resident_limit_bytes"), limit);
  const double reported = MetricValue(metrics, "folio_worker_resident_bytes");
  EXPECT_GT(reported, 0);
  EXPECT_LE(reported, limit);
  const double reported_peak = MetricValue(metrics, "folio_worker_resident_peak_bytes");
  EXPECT_GE(reported_peak, reported);
  EXPECT_LE(reported_peak, limit);
}

TEST(WorkerMemoryTest, F16ModelStaysWithinFilePlusKvPlusAllowance) {
  ExpectWithinBound(F16Model());
}

TEST(WorkerMemoryTest, ModelFromEnvironment) {
  const char* model = std::getenv("FOLIO_MEMORY_TEST_MODEL");
  if (model == nullptr || *model == '\0') GTEST_SKIP() << "FOLIO_MEMORY_TEST_MODEL not set";
  ExpectWithinBound(model);
}

TEST(WorkerMemoryTest, HfBf16FolderStaysWithinFilesPlusKvPlusAllowance) {
  ExpectWithinBound(HfFolder());
}

// The F16 model quantized by llama.cpp to `ftype` (kept beside it).
std::string QuantizedModel(const std::string& ftype) {
  const std::string f16 = F16Model();
  if (f16.empty()) return "";
  const std::string path = ModelDir() + "/llama3-300m-v1-" + ftype + ".gguf";
  if (!std::filesystem::exists(path)) {
    const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
    absl::Status s = reference::Quantize(f16, tmp, ftype, 2);
    if (!s.ok()) {
      ADD_FAILURE() << s;
      return "";
    }
    std::filesystem::rename(tmp, path);
  }
  return path;
}

TEST(WorkerMemoryTest, Q4KMModelStaysWithinFilePlusKvPlusAllowance) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ExpectWithinBound(QuantizedModel("Q4_K_M"));
}

// Q4_0 (like Q4_K_M's q4_K / q6_K) runs its integer kernel on the mapped blocks.
TEST(WorkerMemoryTest, Q4_0ModelStaysWithinFilePlusKvPlusAllowance) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ExpectWithinBound(QuantizedModel("Q4_0"));
}

// Q8_0 and BF16 run their own kernels on the mapped bytes (no f32 widening, no panels).
TEST(WorkerMemoryTest, Q8_0ModelStaysWithinFilePlusKvPlusAllowance) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ExpectWithinBound(QuantizedModel("Q8_0"));
}

TEST(WorkerMemoryTest, BF16ModelStaysWithinFilePlusKvPlusAllowance) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  ExpectWithinBound(QuantizedModel("BF16"));
}

}  // namespace
}  // namespace folio
