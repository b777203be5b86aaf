#include "services/worker/dist/in_process_tp_runner.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/kv_block_file.h"
#include "services/worker/dist/gloo_communicator.h"
#include "services/worker/dist/kv_store.h"

namespace folio::worker {

absl::StatusOr<std::unique_ptr<InProcessTpRunner>> InProcessTpRunner::Create(
    const ModelWeights& weights, const InProcessTpOptions& options) {
  const int32_t n = options.tp_size;
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tp_size must be positive, got ", n));
  }
  // Refuse a model that does not split before any rank waits for the others.
  if (absl::Status s = CheckTpShard(weights.config, {.rank = 0, .size = n}); !s.ok()) return s;
  // Join every rank at once (each blocks until all have published), then build each
  // rank's shard on its own thread too.
  KvStore store;
  std::unique_ptr<InProcessTpRunner> group(new InProcessTpRunner());
  group->comms_.resize(n);
  group->runners_.resize(n);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      LocalGlooStore gloo_store(&store, options.timeout);
      GlooCommunicatorOptions comm_options;
      comm_options.rank = r;
      comm_options.world_size = n;
      comm_options.timeout = options.timeout;
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(comm_options, gloo_store);
      if (!comm.ok()) {
        status[r] = comm.status();
        return;
      }
      group->comms_[r] = *std::move(comm);
      CpuModelRunnerOptions runner_options = options.runner;
      runner_options.communicator = group->comms_[r].get();
      absl::StatusOr<std::unique_ptr<CpuModelRunner>> runner =
          CpuModelRunner::Create(weights, runner_options);
      if (!runner.ok()) {
        status[r] = runner.status();
        return;
      }
      group->runners_[r] = *std::move(runner);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return group;
}

absl::StatusOr<StepOutput> InProcessTpRunner::Execute(const StepInput& step) {
  const int32_t n = tp_size();
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int32_t r = 1; r < n; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<StepOutput> out = runners_[r]->Execute(step);
      status[r] = out.status();
    });
  }
  absl::StatusOr<StepOutput> out = runners_[0]->Execute(step);
  status[0] = out.status();
  for (std::thread& t : threads) t.join();
  for (int32_t r = 0; r < n; ++r) {
    if (!status[r].ok()) {
      // The disk blocks any rank could not load go with the first failure.
      return WithKvDiskBlocksOf(
          absl::Status(status[r].code(), absl::StrCat("rank ", r, ": ", status[r].message())),
          status);
    }
  }
  return out;
}

}  // namespace folio::worker
