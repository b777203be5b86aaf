// folio-bench over an OpenAI-compatible HTTP server (Folio's frontend, vLLM, ...): the
// model from GET /v1/models, one streamed POST /v1/completions per request with the
// prompt as token ids, max_tokens, ignore_eos, temperature 0, n, and
// stream_options.include_usage, read as server-sent events.
#ifndef FOLIO_TOOLS_BENCH_OPENAI_CLIENT_H_
#define FOLIO_TOOLS_BENCH_OPENAI_CLIENT_H_

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/bench/backend.h"
#include "tools/bench/http_url.h"
#include "tools/bench/sse.h"

namespace folio::bench {

struct OpenAiOptions {
  std::string base_url;           // http://HOST:PORT
  std::string api_key;            // sent as "Authorization: Bearer KEY" when set
  std::string served_model_name;  // the "model" field; empty: the first id of /v1/models
  // The model's facts, which the API does not tell: from a model file and/or flags.
  // Flags win; max_model_len falls back on /v1/models' max_model_len, then on the file.
  std::optional<ModelFacts> model_file;
  int vocab_size = 0;
  int max_model_len = 0;
};

// The JSON body of one streamed /v1/completions request.
nlohmann::json CompletionRequestBody(const BenchRequest& request, const std::string& model);

// Reads one streamed /v1/completions answer (status 200) into a RequestResult: TTFT at
// the first chunk carrying text, inter-token latency between such chunks, output tokens
// from the usage chunk (else the text-carrying choices counted), the finish reason, and
// an error event or a stream cut short as a failure.
class CompletionStream {
 public:
  CompletionStream(Backend::Clock::time_point start, RequestResult* out);
  void OnBytes(absl::string_view bytes, Backend::Clock::time_point now);
  bool done() const { return done_; }  // [DONE] or an error seen
  // The stream has ended: sets ok, status, output_tokens and e2e.
  void Finish(Backend::Clock::time_point now);

 private:
  void OnEvent(const std::string& data, Backend::Clock::time_point now);
  void Fail(const std::string& status, const std::string& message);

  const Backend::Clock::time_point start_;
  RequestResult* const out_;
  SseParser parser_;
  Backend::Clock::time_point last_;
  bool done_ = false;
  bool failed_ = false;
  int text_pieces_ = 0;
  std::optional<int> usage_tokens_;
  std::vector<std::string> reasons_;  // finish reasons by choice index
};

class OpenAiBackend : public Backend {
 public:
  // InvalidArgument for a bad base URL.
  static absl::StatusOr<std::unique_ptr<OpenAiBackend>> Create(OpenAiOptions options);

  absl::StatusOr<ModelFacts> Connect() override;
  absl::Status CanSend(const BenchRequest& request) const override;
  void Run(const BenchRequest& request, std::optional<Clock::time_point> deadline,
           RequestResult* out) override;

 private:
  explicit OpenAiBackend(OpenAiOptions options, HttpUrl url)
      : options_(std::move(options)), url_(std::move(url)) {}

  const OpenAiOptions options_;
  const HttpUrl url_;
  std::string model_;  // set by Connect()
};

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_OPENAI_CLIENT_H_
