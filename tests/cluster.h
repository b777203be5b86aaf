// Cluster: a whole local Folio cluster (cachemgr, worker, scheduler, frontend) started
// from the built binaries for end-to-end tests, with stubs to reach each service. With
// num_replicas > 1, that many replicas (cachemgr, workers, scheduler each) behind one
// frontend that routes over them (--replicas); the single-replica accessors name replica 0.
#ifndef FOLIO_TESTS_CLUSTER_H_
#define FOLIO_TESTS_CLUSTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "folio/v1/folio.grpc.pb.h"
#include "tests/service_process.h"

namespace folio::testing {

struct ClusterOptions {
  std::string model;                        // path; required
  std::vector<std::string> cachemgr_args;
  std::vector<std::string> worker_args;     // e.g. --kv_cache_bytes=...; every rank
  int tp_size = 1;                          // worker ranks (tensor parallelism)
  std::vector<std::string> scheduler_args;  // e.g. --num_blocks=40
  std::vector<std::string> frontend_args;
  int num_replicas = 1;
};

class Cluster {
 public:
  // Starts every service and waits until the frontend reports SERVING.
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const ClusterOptions& options);

  folio::v1::TextGeneration::Stub& frontend() { return *frontend_stub_; }
  folio::internal::v1::CacheManager::Stub& cachemgr(int replica = 0) {
    return *replicas_[replica].cachemgr_stub;
  }
  ServiceProcess& cachemgr_process(int replica = 0) { return *replicas_[replica].cachemgr; }
  ServiceProcess& worker_process(int rank = 0, int replica = 0) {
    return *replicas_[replica].workers[rank];
  }
  ServiceProcess& scheduler_process(int replica = 0) { return *replicas_[replica].scheduler; }
  ServiceProcess& frontend_process() { return *frontend_; }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

  // The cache manager's pool figures.
  folio::internal::v1::CacheStats CacheStats(int replica = 0);
  // Polls until every block of every replica is free again (requests end asynchronously),
  // or the timeout.
  bool WaitForEmptyPool(absl::Duration timeout);

 private:
  struct Replica {
    std::unique_ptr<ServiceProcess> cachemgr, scheduler;
    std::vector<std::unique_ptr<ServiceProcess>> workers;  // by rank
    std::unique_ptr<folio::internal::v1::CacheManager::Stub> cachemgr_stub;
  };
  std::vector<Replica> replicas_;
  std::unique_ptr<ServiceProcess> frontend_;
  std::unique_ptr<folio::v1::TextGeneration::Stub> frontend_stub_;
};

// $FOLIO_MODELS_DIR, or nullopt.
std::optional<std::string> ModelsDir();
inline constexpr char kModelsDirHelp[] =
    "no test models: run under ctest (it passes FOLIO_BUILD_DIR, whose test-models/ the "
    "build fills), or set FOLIO_MODELS_DIR to a folder laid out like models/";

// The golden text of stories260K (greedy from BOS, 200 tokens), without the newline the
// reference runner prints at the end.
std::string GoldenText(const std::string& models_dir);

// The value of a metric's sample in a /metrics page, or -1 when absent: `name` as the
// page writes it, labels included (foo_total{proposer="ngram"}).
double MetricValue(const std::string& page, const std::string& name);

}  // namespace folio::testing

#endif  // FOLIO_TESTS_CLUSTER_H_
