#include "common/usage.h"

#include <cstdlib>
#include <iostream>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"

namespace folio {

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  namespace fi = absl::flags_internal;
  // absl::ParseCommandLine is this with kHandleUsage, whose --help exits 1.
  // Usage flags are requests that succeeded, so they exit 0 here; parse errors
  // still exit 1 inside.
  std::vector<char*> args = fi::ParseCommandLineImpl(
      argc, argv, fi::ArgvListAction::kRemoveParsedArgs, fi::UsageFlagsAction::kIgnoreUsage,
      fi::OnUndefinedFlag::kAbortIfUndefined);
  if (fi::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) != -1) {
    std::cout.flush();
    std::exit(0);
  }
  return args;
}

}  // namespace folio
