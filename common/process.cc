#include "common/process.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/usage.h"
#include "common/version.h"
#include "glog/logging.h"

ABSL_FLAG(bool, check_flags, false,
          "Only parse and validate the flags, then exit: 0 when they are valid, else the "
          "code a normal start-up would fail with. Opens no file, port or model.");

namespace folio {

std::vector<char*> InitProcess(int argc, char** argv, const std::string& usage) {
  absl::FlagsUsageConfig config;
  config.version_string = [] { return absl::StrCat("folio ", kVersion, "\n"); };
  config.normalize_filename = [](absl::string_view file) { return std::string(file); };
  // --help lists the flags a binary defines in its own main.cc.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc") || absl::EndsWith(file, "common/process.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> args = ParseFlagsOrExit(argc, argv);
  if (std::getenv("GLOG_logtostderr") == nullptr && std::getenv("GLOG_log_dir") == nullptr) {
    FLAGS_logtostderr = true;
  }
  google::InitGoogleLogging(argv[0]);
#ifdef NDEBUG
  // Debian's Abseil checks every lock against a global lock-order graph: 24 ns for an
  // uncontended lock against 6 ns without (bench/mutex_bench). Release binaries turn it
  // off; debug builds and the tests (which do not call InitProcess) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  return args;
}

bool CheckingFlags() { return absl::GetFlag(FLAGS_check_flags); }

void ExitIfCheckingFlags() {
  if (!CheckingFlags()) return;
  LOG(INFO) << "--check_flags: the flags are valid";
  std::exit(0);
}

}  // namespace folio
