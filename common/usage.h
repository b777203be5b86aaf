// Command-line parsing shared by every Folio binary: Abseil flags, with --help,
// --helpfull,
// --version and friends printing to stdout and exiting 0 (Abseil 20220623 exits
// 1 after
// --help), and an unknown flag or a bad value exiting 1 with a message on
// stderr.
#ifndef FOLIO_COMMON_USAGE_H_
#define FOLIO_COMMON_USAGE_H_

#include <vector>

namespace folio {

// Parses argv into the flags; handles the usage flags (printing, then exiting
// 0). Returns the positional arguments (argv[0] first). Call
// absl::SetProgramUsageMessage and absl::SetFlagsUsageConfig first.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

}  // namespace folio

#endif  // FOLIO_COMMON_USAGE_H_
