// Test-only: the official openai npm client (tests/openai/check.mjs and its package.json)
// for tests that check Folio's OpenAI-compatible HTTP API with it, shared by
// tests/openai_http_test.cc and services/frontend/http/openai_chat_tools_test.cc.
// InstallOpenAiClient copies check.mjs into a folder of the build tree and installs the
// client there on first use; tests sharing the folder (ctest runs them as parallel
// processes) serialize on a file lock in it and count the install done only once npm
// finished (.installed). Thread-compatible; safe across processes.
#ifndef FOLIO_TESTS_OPENAI_CLIENT_H_
#define FOLIO_TESTS_OPENAI_CLIENT_H_

#include <string>

#include "tests/service_process.h"

namespace folio::testing {

// Copies package.json, package-lock.json and check.mjs from `src` into `dir` (only the
// files that differ, so that no other test's running node sees a file rewritten) and runs
// `npm ci` there unless done before. True when the client is ready; false with *skip
// saying why not (no node or npm, npm could not install: the test should skip). A failed
// copy is also a test failure.
bool InstallOpenAiClient(const std::string& dir, const std::string& src, std::string* skip);

// Runs `dir`/check.mjs on the JSON text `spec` (its format is in check.mjs), written to a
// temporary file named after `name` and the process.
CommandResult RunOpenAiClient(const std::string& dir, const std::string& spec,
                              const std::string& name);

}  // namespace folio::testing

#endif  // FOLIO_TESTS_OPENAI_CLIENT_H_
