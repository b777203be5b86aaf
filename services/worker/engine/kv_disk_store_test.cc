#include "services/worker/engine/kv_disk_store.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/kv_block_file.h"
#include "gtest/gtest.h"

namespace folio::worker {
namespace {

namespace fs = std::filesystem;

class KvDiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("folio-kv-disk-store-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  KvDiskStoreOptions Options(int64_t budget_blocks = 8) const {
    KvDiskStoreOptions o;
    o.root = (root_ / "tier").string();
    o.identity = "model=abc;block_size=4";
    o.block_size = 4;
    o.bytes_per_block = 256;
    o.budget_bytes = budget_blocks * KvBlockFileBytes(4, 256);
    return o;
  }

  static std::vector<uint8_t> Payload(int seed) {
    std::vector<uint8_t> p(256);
    std::mt19937 rng(seed);
    for (uint8_t& b : p) b = static_cast<uint8_t>(rng());
    return p;
  }

  fs::path root_;
};

TEST_F(KvDiskStoreTest, ASpilledBlockLoadsBackByteForByte) {
  absl::StatusOr<std::unique_ptr<KvDiskStore>> store = KvDiskStore::Open(Options());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->num_blocks(), 8);
  EXPECT_EQ((*store)->dir(), KvNamespaceDir(Options().root, KvNamespaceHash(Options().identity)));
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  const std::vector<uint8_t> payload = Payload(1);
  (*store)->Spill(0x12, 0x34, tokens, payload.data());
  std::vector<uint8_t> back(256);
  ASSERT_TRUE((*store)->Load(0x12, 0x34, back.data()).ok());
  EXPECT_EQ(back, payload);
  // The cache manager reads the same file's tokens (common/kv_block_file.h).
  absl::StatusOr<std::vector<int32_t>> read = ReadKvBlockFileTokens(
      (*store)->dir(),
      KvBlockFileKey{.namespace_hash = (*store)->namespace_hash(), .hash_hi = 0x12,
                     .hash_lo = 0x34},
      4);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tokens);
  // A store opened again (a restarted worker, another replica) finds it.
  absl::StatusOr<std::unique_ptr<KvDiskStore>> again = KvDiskStore::Open(Options());
  ASSERT_TRUE(again.ok());
  std::fill(back.begin(), back.end(), 0);
  ASSERT_TRUE((*again)->Load(0x12, 0x34, back.data()).ok());
  EXPECT_EQ(back, payload);
  EXPECT_EQ((*store)->stats().num_spills, 1);
  EXPECT_EQ((*again)->stats().num_loads, 1);
  EXPECT_EQ((*again)->stats().bytes_read, KvBlockFileBytes(4, 256));
}

TEST_F(KvDiskStoreTest, ADamagedFileIsDataLossAndRemovedAMissingOneNotFound) {
  std::unique_ptr<KvDiskStore> store = *KvDiskStore::Open(Options());
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<uint8_t> payload = Payload(2);
  store->Spill(1, 2, tokens, payload.data());
  const fs::path file = fs::path(store->dir()) / KvBlockFileName(1, 2, 0);
  ASSERT_TRUE(fs::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 10));
    f.put('\x5a');
  }
  std::vector<uint8_t> back(256);
  EXPECT_EQ(store->Load(1, 2, back.data()).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(store->Load(1, 2, back.data()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->stats().num_load_failures, 2);
  EXPECT_EQ(store->stats().num_loads, 0);
}

TEST_F(KvDiskStoreTest, ABlockOfAnotherModelOrRankCountIsNotLoaded) {
  std::unique_ptr<KvDiskStore> store = *KvDiskStore::Open(Options());
  store->Spill(1, 2, std::vector<int32_t>{1, 2, 3, 4}, Payload(3).data());
  // Another model: another namespace directory, so no file there.
  KvDiskStoreOptions other = Options();
  other.identity = "model=def;block_size=4";
  std::unique_ptr<KvDiskStore> foreign = *KvDiskStore::Open(other);
  EXPECT_NE(foreign->dir(), store->dir());
  std::vector<uint8_t> back(256);
  EXPECT_EQ(foreign->Load(1, 2, back.data()).code(), absl::StatusCode::kNotFound);
  // A file copied into this namespace from another one is refused by its header.
  fs::copy_file(fs::path(store->dir()) / KvBlockFileName(1, 2, 0),
                fs::path(foreign->dir()) / KvBlockFileName(1, 2, 0));
  EXPECT_EQ(foreign->Load(1, 2, back.data()).code(), absl::StatusCode::kDataLoss);
}

TEST_F(KvDiskStoreTest, AFailedWriteStopsWritesAndNeverThrows) {
  std::unique_ptr<KvDiskStore> store = *KvDiskStore::Open(Options());
  fs::remove_all(root_);  // the volume went away
  store->Spill(1, 2, std::vector<int32_t>{1, 2, 3, 4}, Payload(4).data());
  store->Spill(3, 4, std::vector<int32_t>{1, 2, 3, 4}, Payload(5).data());
  EXPECT_TRUE(store->stats().writes_disabled);
  EXPECT_EQ(store->stats().num_spill_failures, 1);
  EXPECT_EQ(store->stats().num_spills_skipped, 1);
  EXPECT_EQ(store->stats().num_spills, 0);
  std::vector<uint8_t> back(256);
  EXPECT_EQ(store->Load(1, 2, back.data()).code(), absl::StatusCode::kNotFound);
}

TEST_F(KvDiskStoreTest, BadOptionsAreClearErrors) {
  EXPECT_EQ(KvDiskStore::Open(Options(0)).status().code(), absl::StatusCode::kInvalidArgument);
  KvDiskStoreOptions o = Options();
  o.rank = 1;  // of 1
  EXPECT_EQ(KvDiskStore::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  // A root that is a file.
  fs::create_directories(root_);
  std::ofstream(root_ / "file") << "x";
  o = Options();
  o.root = (root_ / "file").string();
  absl::StatusOr<std::unique_ptr<KvDiskStore>> s = KvDiskStore::Open(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--kv_disk_dir"), std::string::npos) << s.status();
}

TEST_F(KvDiskStoreTest, AModelsContentIdentityDoesNotDependOnItsPath) {
  fs::create_directories(root_);
  std::vector<char> bytes(3 << 20);
  std::mt19937 rng(7);
  for (char& c : bytes) c = static_cast<char>(rng());
  std::ofstream(root_ / "a.gguf", std::ios::binary).write(bytes.data(), bytes.size());
  fs::copy_file(root_ / "a.gguf", root_ / "b.gguf");
  absl::StatusOr<std::string> a = ModelContentIdentity((root_ / "a.gguf").string());
  absl::StatusOr<std::string> b = ModelContentIdentity((root_ / "b.gguf").string());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // A tensor in the middle changed (a fine-tune): another model.
  std::vector<char> tuned = bytes;
  for (size_t i = (3 << 19); i < (3 << 19) + (64 << 10); ++i) tuned[i] ^= 0x11;
  std::ofstream(root_ / "b.gguf", std::ios::binary).write(tuned.data(), tuned.size());
  EXPECT_NE(*ModelContentIdentity((root_ / "b.gguf").string()), *a);
  // A changed last byte is another model.
  bytes.back() ^= 1;
  std::ofstream(root_ / "b.gguf", std::ios::binary).write(bytes.data(), bytes.size());
  EXPECT_NE(*ModelContentIdentity((root_ / "b.gguf").string()), *a);
  // A directory (safetensors): its files by name.
  fs::create_directories(root_ / "hf");
  fs::copy_file(root_ / "a.gguf", root_ / "hf" / "model.safetensors");
  absl::StatusOr<std::string> dir = ModelContentIdentity((root_ / "hf").string());
  ASSERT_TRUE(dir.ok());
  EXPECT_NE(dir->find("model.safetensors="), std::string::npos) << *dir;
  EXPECT_EQ(ModelContentIdentity((root_ / "none").string()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace folio::worker
