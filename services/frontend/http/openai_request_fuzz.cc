// libFuzzer target: a request body of either endpoint, as arbitrary bytes, must parse to a
// Request or an InvalidArgument status naming what was wrong (and map to a 4xx error
// object), never crash, throw or read out of bounds. Built only with -DFOLIO_FUZZ=ON
// (clang): cmake --build build-fuzz --target openai_request_fuzz, then
// build-fuzz/bin/openai_request_fuzz -max_total_time=60 (tools/run_fuzz.sh builds the dir).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "glog/logging.h"
#include "services/frontend/http/openai_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace folio::frontend::openai;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
    absl::StatusOr<Request> r = ParseRequest(e, body);
    if (r.ok()) continue;
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument) << r.status();
    const HttpError err = ErrorFromStatus(r.status());
    CHECK_EQ(err.http_status, 400) << r.status();
    // As the server writes it: messages may quote invalid UTF-8 from the body.
    (void)err.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
