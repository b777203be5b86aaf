// NCCL behind the Communicator interface. With one GPU (NCCL refuses two ranks on one
// device) the group has one rank: the all-reduce must leave the data as it was, the
// gather must copy the rank's slice, counts must move, and bad set-up must be refused
// with a clear status. Skips without a CUDA device.
#include "services/worker/cuda/nccl_communicator.h"

#include <vector>

#include "gtest/gtest.h"
#include "services/worker/cuda/gpu_test_util.h"

namespace folio::worker::cuda {
namespace {

using testing::Download;
using testing::Upload;

TEST(NcclCommunicatorTest, RefusesABadUniqueIdOrRank) {
  // Checked before NCCL or the device is touched: runs everywhere.
  EXPECT_EQ(NcclCommunicator::Create(0, 1, "short", 0, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(2, 2, std::string(128, '\0'), 0, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, SingleRankAllReduceAndGather) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  absl::StatusOr<std::string> id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(0, 1, *id, 0, nullptr);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->world_size(), 1);

  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i - 7;
  DeviceBuffer data = Upload(values);
  ASSERT_TRUE((*comm)->AllReduceSum(data.get(), 1000, CommDType::kF32).ok());
  EXPECT_EQ(Download<float>(data, 1000), values);

  DeviceBuffer gathered = Upload(std::vector<float>(1000, 0.0f));
  ASSERT_TRUE((*comm)->GatherToRoot(data.get(), gathered.get(), 1000, CommDType::kF32).ok());
  EXPECT_EQ(Download<float>(gathered, 1000), values);

  const CollectiveCounts counts = (*comm)->counts();
  EXPECT_EQ(counts.all_reduces, 1);
  EXPECT_EQ(counts.gathers, 1);
  EXPECT_EQ(counts.bytes, 8000);
}

}  // namespace
}  // namespace folio::worker::cuda
