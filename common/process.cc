#include "common/process.h"

#include <cstdlib>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "glog/logging.h"

namespace folio {

std::vector<char*> InitProcess(int argc, char** argv, const std::string& usage) {
  absl::FlagsUsageConfig config;
  config.version_string = [] { return absl::StrCat("folio ", kVersion, "\n"); };
  config.normalize_filename = [](absl::string_view file) { return std::string(file); };
  // --help lists the flags a binary defines in its own main.cc.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (std::getenv("GLOG_logtostderr") == nullptr && std::getenv("GLOG_log_dir") == nullptr) {
    FLAGS_logtostderr = true;
  }
  google::InitGoogleLogging(argv[0]);
  return args;
}

}  // namespace folio
