// folio-cachemgr: the block pool of one model replica, served over gRPC.
#include <memory>

#include "absl/flags/flag.h"
#include "common/process.h"
#include "common/server_flags.h"
#include "common/service_runner.h"
#include "glog/logging.h"
#include "services/cachemgr/service.h"

ABSL_FLAG(int, port, 0, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, policy, "paged",
          "Allocation policy: paged (PagedAttention) or contiguous (reserve max_len per sequence, "
          "the baseline).");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block, unless the Configure RPC says otherwise.");
ABSL_FLAG(int, num_blocks, 0,
          "Configure a pool of this many blocks at start-up. 0 (default): wait for the "
          "scheduler's Configure RPC. Health reports NOT_SERVING until a pool exists.");
ABSL_FLAG(bool, enable_prefix_caching, true, "Find full computed blocks again by content hash.");
ABSL_FLAG(bool, round_to_power_of_two, false,
          "Contiguous policy: round each reservation up to a power of two blocks.");

int main(int argc, char** argv) {
  folio::CatchTerminationSignals();
  folio::InitProcess(argc, argv,
                     "the KV block pool of one model replica.\n"
                     "Usage: folio-cachemgr [--port=N] [--policy=paged|contiguous] ...");
  using folio::cachemgr::CacheConfig;
  CacheConfig defaults;
  auto policy = folio::cachemgr::ParsePolicyKind(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) {
    LOG(ERROR) << "--policy: " << policy.status().message();
    return 2;
  }
  defaults.policy = *policy;
  defaults.block_size = absl::GetFlag(FLAGS_block_size);
  defaults.prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching)
                                ? folio::cachemgr::PagedPolicy::PrefixCaching::kEnabled
                                : folio::cachemgr::PagedPolicy::PrefixCaching::kDisabled;
  defaults.rounding = absl::GetFlag(FLAGS_round_to_power_of_two)
                          ? folio::cachemgr::ContiguousPolicy::Rounding::kPowerOfTwo
                          : folio::cachemgr::ContiguousPolicy::Rounding::kExact;
  folio::ExitIfCheckingFlags();

  folio::MetricsRegistry registry;
  folio::cachemgr::CacheManagerService service(defaults, &registry);
  folio::ServerOptions options =
      folio::ServerOptionsFromFlags("folio.internal.v1.CacheManager", absl::GetFlag(FLAGS_port));
  auto runner = folio::ServiceRunner::Start(options, {&service}, &registry);
  if (!runner.ok()) {
    LOG(ERROR) << runner.status();
    return 1;
  }
  folio::ServiceRunner* r = runner->get();
  service.SetOnConfigured([r] { r->SetServing(folio::ServingState::kServing); });
  if (absl::GetFlag(FLAGS_num_blocks) > 0) {
    CacheConfig config = defaults;
    config.num_blocks = absl::GetFlag(FLAGS_num_blocks);
    if (absl::Status s = service.Configure(config); !s.ok()) {
      LOG(ERROR) << "--num_blocks: " << s;
      return 2;
    }
  }
  const int sig = folio::WaitForTerminationSignal();
  LOG(INFO) << "signal " << sig << ", shutting down";
  (*runner)->Shutdown();
  return 0;
}
