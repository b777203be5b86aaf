// InProcessTpRunner: a tensor-parallel group of CpuModelRunner ranks inside one process,
// presented as one ModelRunner. Each rank has its own GlooCommunicator over loopback TCP
// (the rendezvous goes through an in-process KvStore), so the collectives are the same
// Gloo code the worker processes run. Execute runs the step on every rank at once (rank 0
// on the calling thread, the others on a thread each) and answers with rank 0's output.
// For folio-run --tp and for tests.
//
// Thread-compatible: one thread calls Execute.
#ifndef FOLIO_SERVICES_WORKER_DIST_IN_PROCESS_TP_RUNNER_H_
#define FOLIO_SERVICES_WORKER_DIST_IN_PROCESS_TP_RUNNER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/model_runner.h"

namespace folio::worker {

struct InProcessTpOptions {
  int32_t tp_size = 2;
  // Every rank's runner options (num_threads is per rank; the communicator is set here).
  CpuModelRunnerOptions runner;
  absl::Duration timeout = absl::Seconds(60);  // rendezvous and each collective
};

class InProcessTpRunner final : public ModelRunner {
 public:
  // Joins the ranks and builds each rank's runner from its shard of `weights` (not kept).
  // InvalidArgument when the model does not split over tp_size ranks (cpu_weights.h).
  static absl::StatusOr<std::unique_ptr<InProcessTpRunner>> Create(
      const ModelWeights& weights, const InProcessTpOptions& options);

  // Rank 0's output; the first rank's error if any rank fails.
  absl::StatusOr<StepOutput> Execute(const StepInput& step) override;

  const ModelConfig& config() const override { return runners_[0]->config(); }
  int32_t block_size() const override { return runners_[0]->block_size(); }
  int64_t num_blocks() const override { return runners_[0]->num_blocks(); }

  int32_t tp_size() const { return static_cast<int32_t>(runners_.size()); }
  const CpuModelRunner& rank(int32_t r) const { return *runners_[r]; }
  const Communicator& communicator(int32_t r) const { return *comms_[r]; }

 private:
  InProcessTpRunner() = default;

  // Declared first, destroyed last: the runners use them.
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<CpuModelRunner>> runners_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_DIST_IN_PROCESS_TP_RUNNER_H_
