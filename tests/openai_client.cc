// The openai npm client for tests (see openai_client.h).
#include "tests/openai_client.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace folio::testing {

bool InstallOpenAiClient(const std::string& dir, const std::string& src, std::string* skip) {
  if (RunCommand("command -v node && command -v npm").exit_code != 0) {
    *skip = "node and npm are needed for the openai client check";
    return false;
  }
  // ctest runs tests in parallel and they may share `dir`: copy and install under an
  // exclusive lock, never rewrite a file another test's node may be reading (cmp), and
  // count the package as there only once npm has finished (.installed).
  CommandResult copy = RunCommand(absl::StrCat(
      "mkdir -p ", dir, " && flock ", dir, "/.install.lock sh -c 'for f in package.json "
      "package-lock.json check.mjs; do cmp -s ", src, "/$f ", dir, "/$f || cp ", src, "/$f ",
      dir, "/$f || exit 1; done'"));
  EXPECT_EQ(copy.exit_code, 0) << copy.output;
  CommandResult install = RunCommand(absl::StrCat(
      "flock ", dir, "/.install.lock sh -c 'test -f ", dir, "/.installed || (cd ", dir,
      " && npm ci --no-audit --no-fund --loglevel=error && touch .installed)'"));
  if (install.exit_code != 0) {
    *skip = "npm could not install the openai package (is the registry reachable?): " +
            install.output;
    return false;
  }
  return copy.exit_code == 0;
}

CommandResult RunOpenAiClient(const std::string& dir, const std::string& spec,
                              const std::string& name) {
  const std::string spec_path =
      absl::StrCat(::testing::TempDir(), "/", name, "_", getpid(), ".json");
  std::ofstream(spec_path) << spec;
  CommandResult run = RunCommand(absl::StrCat("node ", dir, "/check.mjs ", spec_path));
  std::remove(spec_path.c_str());
  return run;
}

}  // namespace folio::testing
