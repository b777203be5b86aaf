// Start-up shared by every Folio binary: usage text, --version, glog to stderr, and
// flag parsing. Call InitProcess() first thing in main().
#ifndef FOLIO_COMMON_PROCESS_H_
#define FOLIO_COMMON_PROCESS_H_

#include <string>
#include <vector>

namespace folio {

// Sets the usage message and --version, parses Abseil flags and starts glog (logging to
// stderr unless GLOG_* environment variables say otherwise). Returns the positional
// arguments (argv[0] first).
std::vector<char*> InitProcess(int argc, char** argv, const std::string& usage);

}  // namespace folio

#endif  // FOLIO_COMMON_PROCESS_H_
