#include "common/kv_block_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

class KvBlockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kv_block_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    tokens_.resize(16);
    std::iota(tokens_.begin(), tokens_.end(), 100);
    payload_.resize(4096 + 3);  // not a multiple of 8: the checksum's tail too
    for (size_t i = 0; i < payload_.size(); ++i) payload_[i] = static_cast<uint8_t>(i * 7 + 1);
    key_ = KvBlockFileKey{.namespace_hash = 0x1234, .hash_hi = 0xabc, .hash_lo = 0xdef,
                          .rank = 1, .num_ranks = 2};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path() const {
    return dir_ + "/" + KvBlockFileName(key_.hash_hi, key_.hash_lo, key_.rank);
  }
  absl::Status Read(std::vector<uint8_t>* out) const {
    out->assign(payload_.size(), 0);
    return ReadKvBlockFile(dir_, key_, 16, absl::MakeSpan(*out));
  }

  std::string dir_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> payload_;
  KvBlockFileKey key_;
};

TEST_F(KvBlockFileTest, RoundTripsBitExactAndLeavesNoTemporaryFile) {
  ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
  std::vector<uint8_t> back;
  ASSERT_TRUE(Read(&back).ok());
  EXPECT_EQ(back, payload_);
  absl::StatusOr<std::vector<int32_t>> tokens = ReadKvBlockFileTokens(dir_, key_, 16);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, tokens_);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename().string(), KvBlockFileName(0xabc, 0xdef, 1));
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(std::filesystem::file_size(Path()),
            static_cast<uintmax_t>(KvBlockFileBytes(16, static_cast<int64_t>(payload_.size()))));
}

TEST_F(KvBlockFileTest, AMissingFileIsNotFound) {
  std::vector<uint8_t> back;
  EXPECT_EQ(Read(&back).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadKvBlockFileTokens(dir_, key_, 16).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KvBlockFileTest, EveryFlippedByteIsDataLoss) {
  ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
  const int64_t size = KvBlockFileBytes(16, static_cast<int64_t>(payload_.size()));
  // A byte in the header, in the tokens, at the start, middle and end of the payload.
  for (int64_t at : {int64_t{3}, int64_t{20}, int64_t{75}, int64_t{72 + 64},
                     int64_t{72 + 64 + 2000}, size - 1}) {
    SCOPED_TRACE(at);
    ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
    const int fd = open(Path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b;
    ASSERT_EQ(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
    close(fd);
    std::vector<uint8_t> back;
    EXPECT_EQ(Read(&back).code(), absl::StatusCode::kDataLoss);
  }
}

TEST_F(KvBlockFileTest, ACutOrLengthenedFileIsDataLoss) {
  ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
  const int64_t size = KvBlockFileBytes(16, static_cast<int64_t>(payload_.size()));
  for (int64_t length : {int64_t{0}, int64_t{10}, int64_t{100}, size - 1, size + 1}) {
    SCOPED_TRACE(length);
    ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
    ASSERT_EQ(truncate(Path().c_str(), length), 0);
    std::vector<uint8_t> back;
    EXPECT_EQ(Read(&back).code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(ReadKvBlockFileTokens(dir_, key_, 16).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST_F(KvBlockFileTest, AnotherModelsOrBlocksOrRanksFileIsDataLoss) {
  ASSERT_TRUE(WriteKvBlockFile(dir_, key_, tokens_, payload_).ok());
  std::vector<uint8_t> back(payload_.size());
  for (KvBlockFileKey other : {KvBlockFileKey{.namespace_hash = 0x9999, .hash_hi = 0xabc,
                                              .hash_lo = 0xdef, .rank = 1, .num_ranks = 2},
                               KvBlockFileKey{.namespace_hash = 0x1234, .hash_hi = 0xabc,
                                              .hash_lo = 0xdef, .rank = 1, .num_ranks = 4}}) {
    EXPECT_EQ(ReadKvBlockFile(dir_, other, 16, absl::MakeSpan(back)).code(),
              absl::StatusCode::kDataLoss);
  }
  // A file renamed to another block's name.
  KvBlockFileKey renamed = key_;
  renamed.hash_lo = 0xeee;
  std::filesystem::rename(Path(), dir_ + "/" + KvBlockFileName(0xabc, 0xeee, 1));
  EXPECT_EQ(ReadKvBlockFile(dir_, renamed, 16, absl::MakeSpan(back)).code(),
            absl::StatusCode::kDataLoss);
  // Another block size, or another payload size.
  EXPECT_EQ(ReadKvBlockFileTokens(dir_, renamed, 32).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> shorter(payload_.size() - 1);
  EXPECT_EQ(ReadKvBlockFile(dir_, renamed, 16, absl::MakeSpan(shorter)).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(KvBlockFileTest, AnUnwritableDirectoryIsAnErrorNotACrash) {
  EXPECT_FALSE(WriteKvBlockFile(dir_ + "/absent", key_, tokens_, payload_).ok());
}

TEST(KvBlockFileNamesTest, NamesAndNamespacesRoundTrip) {
  uint64_t hi = 0, lo = 0;
  EXPECT_TRUE(ParseKvBlockFileName(KvBlockFileName(0x0123456789abcdefULL, 42, 0), &hi, &lo));
  EXPECT_EQ(hi, 0x0123456789abcdefULL);
  EXPECT_EQ(lo, 42u);
  EXPECT_FALSE(ParseKvBlockFileName(KvBlockFileName(1, 2, 1), &hi, &lo));  // rank 1
  EXPECT_FALSE(ParseKvBlockFileName("namespace.txt", &hi, &lo));
  EXPECT_FALSE(ParseKvBlockFileName("zz23456789abcdef0123456789abcdef.r0.kv", &hi, &lo));
  const uint64_t ns = KvNamespaceHash("model=a;layers=2");
  EXPECT_NE(ns, KvNamespaceHash("model=a;layers=3"));
  absl::StatusOr<uint64_t> parsed = ParseKvNamespaceDir(KvNamespaceDir("/var/kv/", ns));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, ns);
  EXPECT_FALSE(ParseKvNamespaceDir("/var/kv").ok());
}

// A refusal names the blocks it could not load in a payload; the refusal of several ranks
// gathers theirs, each block once; and the payload crosses gRPC (status details) intact.
TEST(KvDiskBlocksTest, RefusalsCarryTheirBlocksOverSeveralRanksAndThroughGrpc) {
  using Blocks = std::vector<std::pair<uint64_t, uint64_t>>;
  const Blocks a = {{1, 2}, {0xffffffffffffffffULL, 0}};
  const absl::Status one =
      WithKvDiskBlocks(absl::DataLossError("2 KV block(s) could not be loaded"), a);
  EXPECT_EQ(KvDiskBlocksOf(one), a);
  EXPECT_EQ(one.message(), "2 KV block(s) could not be loaded");
  const absl::Status two = WithKvDiskBlocks(one, Blocks{{5, 6}, {1, 2}});
  EXPECT_EQ(KvDiskBlocksOf(two), (Blocks{{1, 2}, {0xffffffffffffffffULL, 0}, {5, 6}}));
  EXPECT_TRUE(KvDiskBlocksOf(absl::UnavailableError("worker rank 0: Socket closed")).empty());
  EXPECT_TRUE(WithKvDiskBlocks(absl::OkStatus(), a).ok());
  // A group's answer gathers its ranks' blocks, each once.
  const absl::Status gathered = WithKvDiskBlocksOf(
      absl::UnavailableError("rank 1: lost"),
      {one, absl::CancelledError("echo"),
       WithKvDiskBlocks(absl::DataLossError("r2"), Blocks{{5, 6}})});
  EXPECT_EQ(gathered.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(KvDiskBlocksOf(gathered), (Blocks{{1, 2}, {0xffffffffffffffffULL, 0}, {5, 6}}));
  absl::Status cut = absl::DataLossError("x");
  cut.SetPayload(kKvDiskBlocksPayload, absl::Cord("0123456789abcde"));  // 15 bytes
  EXPECT_TRUE(KvDiskBlocksOf(cut).empty());

  const grpc::Status wire = ToGrpcStatus(two);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_FALSE(wire.error_details().empty());
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(back.message(), two.message());
  EXPECT_EQ(KvDiskBlocksOf(back), KvDiskBlocksOf(two));
  // No payload: no details; details that do not parse leave the code and message.
  EXPECT_TRUE(ToGrpcStatus(absl::DataLossError("y")).error_details().empty());
  const absl::Status garbage =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::DATA_LOSS, "z", "\xff\xff\xff"));
  EXPECT_EQ(garbage.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(garbage.message(), "z");
  EXPECT_TRUE(KvDiskBlocksOf(garbage).empty());
}

}  // namespace
}  // namespace folio
