// Start-up shared by every Folio binary: usage text, --version, glog to stderr, flag
// parsing, and the --check_flags mode. Call InitProcess() first thing in main().
#ifndef FOLIO_COMMON_PROCESS_H_
#define FOLIO_COMMON_PROCESS_H_

#include <string>
#include <vector>

namespace folio {

// Sets the usage message and --version, parses Abseil flags and starts glog (logging to
// stderr unless GLOG_* environment variables say otherwise), and in release builds turns
// off Abseil's mutex deadlock detection (a cost on every lock). Returns the positional
// arguments (argv[0] first). An unknown flag or a value of the wrong type ends the
// process with a message, as Abseil does.
std::vector<char*> InitProcess(int argc, char** argv, const std::string& usage);

// --check_flags: every binary accepts it. A main() calls ExitIfCheckingFlags() once it has
// validated its flags and before it opens files, binds ports or loads a model; with
// --check_flags set, the process logs that the flags are valid and exits 0 there. Bad
// flags still end the process with the binary's own error and exit code, so deployment
// manifests can be checked against the binaries they name.
bool CheckingFlags();
void ExitIfCheckingFlags();

}  // namespace folio

#endif  // FOLIO_COMMON_PROCESS_H_
