// The main() of every test binary: gtest's, run in a temporary folder of the process's own.
//
// ctest runs the tests of one binary as separate processes side by side, and
// ::testing::TempDir() is /tmp/ for all of them: two tests writing the same file name
// there read each other's files. Each process here makes its own folder under $TMPDIR
// (or /tmp), names it in TEST_TMPDIR (which TempDir() reads) and removes it on exit.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") +
                    "/folio-test-XXXXXX";
  const bool made = ::mkdtemp(dir.data()) != nullptr;
  if (made) ::setenv("TEST_TMPDIR", dir.c_str(), /*overwrite=*/1);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (made) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return rc;
}
