// Split GGUF models (gguf_split.h) end to end: a random model cut into shards by a
// small splitter below (llama.cpp's layout: the first shard keeps all metadata, every
// shard gets split.no / split.count / split.tensors.count as u16/u16/i32), loaded from
// its first shard, must give exactly the unsplit model's logits; a missing shard and
// disagreeing split keys are errors naming the file (and key).
#include <filesystem>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_split.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void CopyKv(absl::string_view key, const GgufValue& v, GgufWriter* w) {
  switch (v.type()) {
    case GgufType::kUint32: w->AddUint32(key, static_cast<uint32_t>(*v.AsInt64())); return;
    case GgufType::kInt32: w->AddInt32(key, static_cast<int32_t>(*v.AsInt64())); return;
    case GgufType::kUint64: w->AddUint64(key, static_cast<uint64_t>(*v.AsInt64())); return;
    case GgufType::kFloat32: w->AddFloat32(key, static_cast<float>(*v.AsDouble())); return;
    case GgufType::kFloat64: w->AddFloat64(key, *v.AsDouble()); return;
    case GgufType::kBool: w->AddBool(key, *v.AsBool()); return;
    case GgufType::kString: w->AddString(key, *v.AsString()); return;
    case GgufType::kArray: break;
    default: LOG(FATAL) << "splitter: key " << key << " of type " << GgufTypeName(v.type());
  }
  std::vector<std::string> strs;
  std::vector<float> floats;
  std::vector<int32_t> ints;
  for (uint64_t i = 0; i < v.array_size(); ++i) {
    switch (v.array_type()) {
      case GgufType::kString: strs.emplace_back(*v.ArrayString(i)); break;
      case GgufType::kFloat32: floats.push_back(static_cast<float>(*v.ArrayDouble(i))); break;
      case GgufType::kInt32: ints.push_back(static_cast<int32_t>(*v.ArrayInt64(i))); break;
      default: LOG(FATAL) << "splitter: array " << key << " of " << GgufTypeName(v.array_type());
    }
  }
  if (v.array_type() == GgufType::kString) w->AddStringArray(key, strs);
  if (v.array_type() == GgufType::kFloat32) w->AddFloat32Array(key, floats);
  if (v.array_type() == GgufType::kInt32) w->AddInt32Array(key, ints);
}

struct SplitKeys {
  int no, count, tensors;
};

// Writes `in` as `count` shards <prefix>-0000i-of-0000N.gguf, tensors dealt out in
// file order in near-equal runs. `tamper` may change a shard's split keys.
std::vector<std::string> SplitGguf(const std::string& in, const std::string& prefix, int count,
                                   const std::function<void(SplitKeys*)>& tamper = nullptr,
                                   absl::string_view drop_key = "") {
  const std::string bytes = testing::ReadFileOrEmpty(in);
  CHECK(!bytes.empty()) << in;
  absl::StatusOr<GgufFile> f = GgufFile::Parse(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, in);
  CHECK(f.ok()) << f.status();
  const size_t n = f->tensors().size();
  std::vector<std::string> paths;
  for (int s = 0; s < count; ++s) {
    GgufWriter w;
    SplitKeys k{s, count, static_cast<int>(n)};
    if (tamper) tamper(&k);
    w.AddUint16(kGgufSplitNoKey, static_cast<uint16_t>(k.no));
    w.AddUint16(kGgufSplitCountKey, static_cast<uint16_t>(k.count));
    w.AddInt32(kGgufSplitTensorsCountKey, k.tensors);
    if (s == 0) {
      for (const auto& [key, v] : f->metadata()) {
        if (key != drop_key) CopyKv(key, v, &w);
      }
    }
    for (size_t t = n * s / count; t < n * (s + 1) / count; ++t) {
      const GgufTensorInfo& ti = f->tensors()[t];
      w.AddTensorBytes(ti.name, GgmlTypeToDType(ti.type),
                       std::vector<int64_t>(ti.ne.rbegin(), ti.ne.rend()),
                       {ti.data, ti.size_bytes});
    }
    paths.push_back(GgufSplitPath(prefix, s, count));
    CHECK(w.WriteFile(paths.back()).ok()) << paths.back();
  }
  return paths;
}

// A fresh directory, removed with everything in it when the test ends.
class ScopedDir {
 public:
  explicit ScopedDir(const std::string& name) {
    const char* base = std::getenv("TEST_TMPDIR");
    path_ = (std::filesystem::path(base != nullptr ? base : "/tmp") /
             absl::StrCat("folio-split-", name, "-", ::getpid()))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScopedDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string WriteModel(const std::string& dir) {
  RandomModelOptions o;
  o.architecture = "qwen2";  // biases too: more tensors to deal out
  o.dim = 64;
  o.hidden_dim = 192;
  o.num_layers = 3;
  o.dtype = DType::kQ8_0;
  o.vocab_size = 320;
  const std::string path = dir + "/model.gguf";
  CHECK(WriteRandomModel(o, path).ok()) << path;
  return path;
}

TEST(SplitModelTest, ThreeShardsGiveExactlyTheUnsplitLogits) {
  const ScopedDir scoped("logits");
  const std::string& dir = scoped.path();
  const std::string model = WriteModel(dir);
  const std::vector<std::string> shards = SplitGguf(model, dir + "/m", 3);
  absl::StatusOr<std::unique_ptr<ModelWeights>> whole = LoadModel(model);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<std::unique_ptr<ModelWeights>> split = LoadModel(shards[0]);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->config.num_layers, 3);
  EXPECT_EQ((*split)->config.stored_type, "Q8_0");  // general.file_type 7
  EXPECT_GT((*split)->file_bytes(), std::filesystem::file_size(shards[0]));
  const auto want = testing::PromptAndDecodeLogits(**whole, 4);
  const auto got = testing::PromptAndDecodeLogits(**split, 4);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(want[i].empty());
    EXPECT_EQ(got[i], want[i]) << "step " << i;
  }
}

TEST(SplitModelTest, MissingShardNamesTheFile) {
  const ScopedDir scoped("missing");
  const std::string& dir = scoped.path();
  const std::vector<std::string> shards = SplitGguf(WriteModel(dir), dir + "/m", 3);
  std::filesystem::remove(shards[1]);
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(shards[0]);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsNotFound(w.status())) << w.status();
  EXPECT_THAT(w.status().message(), AllOf(HasSubstr(shards[1]), HasSubstr("shard 2 of 3")));
}

TEST(SplitModelTest, DisagreeingSplitKeysNameFileAndKey) {
  const ScopedDir scoped("keys");
  const std::string& dir = scoped.path();
  const std::string model = WriteModel(dir);
  struct Case {
    std::string name;
    std::function<void(SplitKeys*)> tamper;
    int bad_shard;  // whose file the message names
    const char* key;
  };
  const std::vector<Case> cases = {
      {"count", [](SplitKeys* k) { if (k->no == 2) k->count = 4; }, 2, kGgufSplitCountKey},
      {"no", [](SplitKeys* k) { if (k->no == 2) k->no = 1; }, 2, kGgufSplitNoKey},
      {"tensors", [](SplitKeys* k) { if (k->no == 1) k->tensors += 1; }, 1,
       kGgufSplitTensorsCountKey},
      {"total", [](SplitKeys* k) { k->tensors += 1; }, 0, kGgufSplitTensorsCountKey},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<std::string> shards = SplitGguf(model, dir + "/" + c.name, 3, c.tamper);
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(shards[0]);
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
    EXPECT_THAT(w.status().message(),
                AllOf(HasSubstr(shards[c.bad_shard]), HasSubstr(absl::StrCat("'", c.key, "'"))));
  }
}

TEST(SplitModelTest, LoadingALaterShardOrARenamedFirstShardIsRefused) {
  const ScopedDir scoped("order");
  const std::string& dir = scoped.path();
  const std::vector<std::string> shards = SplitGguf(WriteModel(dir), dir + "/m", 2);
  absl::StatusOr<std::unique_ptr<ModelWeights>> later = LoadModel(shards[1]);
  ASSERT_FALSE(later.ok());
  EXPECT_THAT(later.status().message(),
              AllOf(HasSubstr(shards[1]), HasSubstr("'split.no' is 1"), HasSubstr("first shard")));
  const std::string renamed = dir + "/renamed.gguf";
  std::filesystem::copy_file(shards[0], renamed);
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(renamed);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(),
              AllOf(HasSubstr(renamed), HasSubstr("-00001-of-00002.gguf")));
}

TEST(SplitModelTest, StoredTypeWithoutFileTypeIsTheDominantTensorType) {
  const ScopedDir scoped("stored");
  const std::string& dir = scoped.path();
  const std::vector<std::string> one =
      SplitGguf(WriteModel(dir), dir + "/m", 1, nullptr, "general.file_type");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(one[0]);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->config.stored_type, "Q8_0");  // the matrices; norms and biases are f32
  EXPECT_EQ((*w)->config.num_layers, 3);
}

}  // namespace
}  // namespace folio::worker
