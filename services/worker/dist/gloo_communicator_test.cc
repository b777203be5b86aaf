// GlooCommunicator over loopback TCP with ranks on threads: sums and gathers in every
// element type, the collective counts, the rendezvous through rank 0's gRPC service, a
// rendezvous that times out, a peer that leaves mid-way breaking the group, and a broken
// group formed again under a new generation's keys.
#include "services/worker/dist/gloo_communicator.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/service_runner.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "services/worker/dist/kv_store.h"
#include "services/worker/dist/rendezvous_service.h"
#include "services/worker/model/dequant.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

// Joins `n` ranks through `store` under `key_prefix`; each gets its communicator or error.
std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> JoinGroupIn(
    KvStore& store, const std::string& key_prefix, int n, absl::Duration timeout) {
  std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      LocalGlooStore gloo_store(&store, timeout);
      GlooCommunicatorOptions o;
      o.rank = r;
      o.world_size = n;
      o.timeout = timeout;
      o.key_prefix = key_prefix;
      out[r] = GlooCommunicator::Create(o, gloo_store);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Joins `n` ranks through a store of their own.
std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> JoinGroup(
    int n, absl::Duration timeout = absl::Seconds(20)) {
  KvStore store;
  return JoinGroupIn(store, "folio-tp", n, timeout);
}

// Runs fn(rank) on a thread per rank.
void OnEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicatorTest, AllReduceSumsEveryTypeAndCounts) {
  constexpr int kRanks = 3;
  auto comms = JoinGroup(kRanks);
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  constexpr int kCount = 1000;
  std::vector<std::vector<float>> f32(kRanks);
  std::vector<std::vector<uint16_t>> f16(kRanks), bf16(kRanks);
  std::vector<absl::Status> status(kRanks * 3);
  OnEveryRank(kRanks, [&](int r) {
    for (int i = 0; i < kCount; ++i) {
      const float v = static_cast<float>(r + 1) * 0.25f + static_cast<float>(i % 7);
      f32[r].push_back(v);
      f16[r].push_back(F32ToF16(v));
      bf16[r].push_back(F32ToBF16(v));
    }
    Communicator& c = **comms[r];
    status[3 * r] = c.AllReduceSum(f32[r].data(), kCount, CommDType::kF32);
    status[3 * r + 1] = c.AllReduceSum(f16[r].data(), kCount, CommDType::kF16);
    status[3 * r + 2] = c.AllReduceSum(bf16[r].data(), kCount, CommDType::kBF16);
  });
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kCount; ++i) {
      // (1 + 2 + 3) * 0.25 + 3 * (i % 7): exact in every type used here.
      const float want = 1.5f + 3.0f * static_cast<float>(i % 7);
      ASSERT_EQ(f32[r][i], want) << "rank " << r << " element " << i;
      ASSERT_EQ(F16ToF32(f16[r][i]), want) << "rank " << r << " element " << i;
      ASSERT_EQ(BF16ToF32(bf16[r][i]), want) << "rank " << r << " element " << i;
    }
    const CollectiveCounts counts = (*comms[r])->counts();
    EXPECT_EQ(counts.all_reduces, 3);
    EXPECT_EQ(counts.gathers, 0);
    EXPECT_EQ(counts.bytes, kCount * (4 + 2 + 2));
  }
}

TEST(GlooCommunicatorTest, GatherToRootInRankOrder) {
  constexpr int kRanks = 3;
  auto comms = JoinGroup(kRanks);
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  constexpr int kCount = 5;
  std::vector<float> recv(kRanks * kCount, -1.0f);
  std::vector<absl::Status> status(kRanks);
  OnEveryRank(kRanks, [&](int r) {
    std::vector<float> send(kCount);
    for (int i = 0; i < kCount; ++i) send[i] = static_cast<float>(100 * r + i);
    status[r] = (*comms[r])->GatherToRoot(send.data(), r == 0 ? recv.data() : nullptr, kCount,
                                          CommDType::kF32);
  });
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kCount; ++i) EXPECT_EQ(recv[r * kCount + i], 100.0f * r + i);
    EXPECT_EQ((*comms[r])->counts().gathers, 1);
  }
}

TEST(GlooCommunicatorTest, SingleRankIsTheIdentity) {
  auto comms = JoinGroup(1);
  ASSERT_TRUE(comms[0].ok()) << comms[0].status();
  std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE((*comms[0])->AllReduceSum(v.data(), 3, CommDType::kF32).ok());
  EXPECT_THAT(v, ::testing::ElementsAre(1, 2, 3));
  std::vector<float> out(3);
  ASSERT_TRUE((*comms[0])->GatherToRoot(v.data(), out.data(), 3, CommDType::kF32).ok());
  EXPECT_EQ(out, v);
}

TEST(GlooCommunicatorTest, RejectsBadRank) {
  KvStore store;
  LocalGlooStore gloo_store(&store, absl::Seconds(1));
  GlooCommunicatorOptions o;
  o.rank = 2;
  o.world_size = 2;
  auto c = GlooCommunicator::Create(o, gloo_store);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, RendezvousTimesOutWhenARankNeverComes) {
  KvStore store;
  LocalGlooStore gloo_store(&store, absl::Milliseconds(300));
  GlooCommunicatorOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.timeout = absl::Milliseconds(300);
  auto c = GlooCommunicator::Create(o, gloo_store);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("could not join"));
}

TEST(GlooCommunicatorTest, PeerThatLeavesBreaksTheGroup) {
  auto comms = JoinGroup(2, absl::Seconds(5));
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  comms[1]->reset();  // closes rank 1's connections
  std::vector<float> v(64, 1.0f);
  absl::Status s = (*comms[0])->AllReduceSum(v.data(), 64, CommDType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("rank 0"));
  absl::Status again = (*comms[0])->AllReduceSum(v.data(), 64, CommDType::kF32);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("broken"));
  EXPECT_EQ((*comms[0])->counts().all_reduces, 2);
}

// A broken group formed again in the same store (rank 0's table outlives its groups):
// under the next generation's keys the ranks meet; rank 0's old keys are dropped.
TEST(GlooCommunicatorTest, ABrokenGroupFormsAgainUnderTheNextGenerationsKeys) {
  KvStore store;
  auto first = JoinGroupIn(store, GroupKeyPrefix(1), 2, absl::Seconds(5));
  for (auto& c : first) ASSERT_TRUE(c.ok()) << c.status();
  first[1]->reset();  // rank 1 dies
  std::vector<float> v(8, 1.0f);
  ASSERT_FALSE((*first[0])->AllReduceSum(v.data(), 8, CommDType::kF32).ok());
  EXPECT_FALSE((*first[0])->broken().ok());
  first.clear();
  EXPECT_GT(store.EraseGroupsBefore(2), 0);
  auto second = JoinGroupIn(store, GroupKeyPrefix(2), 2, absl::Seconds(5));
  for (auto& c : second) ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*second[0])->broken().ok());
  std::vector<std::vector<float>> x = {{1, 2}, {10, 20}};
  OnEveryRank(2, [&](int r) {
    EXPECT_TRUE((*second[r])->AllReduceSum(x[r].data(), 2, CommDType::kF32).ok());
  });
  EXPECT_THAT(x[0], ::testing::ElementsAre(11, 22));
  EXPECT_THAT(x[1], ::testing::ElementsAre(11, 22));
}

TEST(GlooCommunicatorTest, RendezvousOverRankZerosGrpcService) {
  KvStore store;
  RendezvousService service(&store);
  ServerOptions server_options;
  server_options.service_name = "folio.internal.v1.Rendezvous";
  server_options.metrics_port = -1;
  auto server = ServiceRunner::Start(server_options, {&service}, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();

  std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> comms(2);
  OnEveryRank(2, [&](int r) {
    GlooCommunicatorOptions o;
    o.rank = r;
    o.world_size = 2;
    o.timeout = absl::Seconds(20);
    if (r == 0) {
      LocalGlooStore local(&store, o.timeout);
      comms[r] = GlooCommunicator::Create(o, local);
    } else {
      GrpcRendezvousStore remote(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
                                 o.timeout);
      comms[r] = GlooCommunicator::Create(o, remote);
    }
  });
  for (auto& c : comms) ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::vector<float>> v = {{1, 2}, {10, 20}};
  OnEveryRank(2, [&](int r) {
    EXPECT_TRUE((*comms[r])->AllReduceSum(v[r].data(), 2, CommDType::kF32).ok());
  });
  EXPECT_THAT(v[0], ::testing::ElementsAre(11, 22));
  EXPECT_THAT(v[1], ::testing::ElementsAre(11, 22));
  comms.clear();
  (*server)->Shutdown();
}

TEST(KvStoreTest, LimitsAndWait) {
  KvStore store;
  EXPECT_EQ(store.Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set(std::string(KvStore::kMaxKeyBytes + 1, 'k'), "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set("k", std::string(KvStore::kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store.Get("a").has_value());
  absl::Status waited = store.Wait({"a"}, absl::Milliseconds(10));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(waited.message(), HasSubstr("[a]"));
  ASSERT_TRUE(store.Set("a", "1").ok());
  EXPECT_TRUE(store.Wait({"a"}, absl::Milliseconds(10)).ok());
  EXPECT_EQ(store.Get("a"), "1");
}

TEST(KvStoreTest, EraseGroupsBeforeDropsOnlyOlderGenerations) {
  KvStore store;
  EXPECT_EQ(GroupKeyPrefix(7), "folio-tp/g7");
  ASSERT_TRUE(store.Set(GroupKeyPrefix(2) + "/0", "a").ok());
  ASSERT_TRUE(store.Set(GroupKeyPrefix(9) + "/0", "b").ok());
  ASSERT_TRUE(store.Set(GroupKeyPrefix(10) + "/1", "c").ok());
  ASSERT_TRUE(store.Set("other", "d").ok());
  EXPECT_EQ(store.EraseGroupsBefore(10), 2);
  EXPECT_FALSE(store.Get(GroupKeyPrefix(2) + "/0").has_value());
  EXPECT_FALSE(store.Get(GroupKeyPrefix(9) + "/0").has_value());
  EXPECT_EQ(store.Get(GroupKeyPrefix(10) + "/1"), "c");  // 10 is not before 10, nor "1" < "10"
  EXPECT_EQ(store.Get("other"), "d");
}

}  // namespace
}  // namespace folio::worker
