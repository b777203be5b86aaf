#include "tools/bench/openai_client.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace folio::bench {

using nlohmann::json;

namespace {

// The "error.message" of an OpenAI error body, or the body itself (cut short).
std::string ErrorMessage(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 300);
}

httplib::Headers Headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

std::string Prefix(const HttpUrl& url) {
  std::string p = url.path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

json CompletionRequestBody(const BenchRequest& request, const std::string& model) {
  json body = {{"model", model},
               {"prompt", request.prompt_token_ids},
               {"max_tokens", request.output_len},
               {"ignore_eos", true},
               {"temperature", request.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (request.n > 1) body["n"] = request.n;
  if (request.temperature > 0) body["seed"] = request.sampling_seed;
  return body;
}

CompletionStream::CompletionStream(Backend::Clock::time_point start, RequestResult* out)
    : start_(start), out_(out) {}

void CompletionStream::OnBytes(absl::string_view bytes, Backend::Clock::time_point now) {
  std::vector<SseEvent> events;
  parser_.Feed(bytes, &events);
  for (const SseEvent& e : events) {
    if (done_) return;
    OnEvent(e.data, now);
  }
}

void CompletionStream::Fail(const std::string& status, const std::string& message) {
  failed_ = true;
  done_ = true;
  out_->status = status;
  out_->error_message = message;
}

void CompletionStream::OnEvent(const std::string& data, Backend::Clock::time_point now) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return Fail("INVALID_RESPONSE", "an event is not a JSON object: " + data.substr(0, 200));
  if (chunk.contains("error")) {
    return Fail("ERROR_EVENT", ErrorMessage(data));
  }
  int with_text = 0;
  if (const auto it = chunk.find("choices"); it != chunk.end() && it->is_array()) {
    for (const json& choice : *it) {
      if (!choice.is_object()) continue;
      if (const auto t = choice.find("text"); t != choice.end() && t->is_string() &&
                                              !t->get_ref<const std::string&>().empty()) {
        ++with_text;
      }
      if (const auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
        const auto i = choice.find("index");
        const int index = i != choice.end() && i->is_number_integer() ? i->get<int>() : 0;
        if (index >= 0 && index < 1024) {
          if (index >= static_cast<int>(reasons_.size())) reasons_.resize(index + 1);
          reasons_[index] = f->get<std::string>();
        }
      }
    }
  }
  if (with_text > 0) {
    if (text_pieces_ == 0) {
      out_->ttft_s = Seconds(now - start_);
    } else {
      out_->itl_s.push_back(Seconds(now - last_));
    }
    last_ = now;
    text_pieces_ += with_text;
  }
  if (const auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    if (const auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
      usage_tokens_ = c->get<int>();
    }
  }
}

void CompletionStream::Finish(Backend::Clock::time_point now) {
  out_->e2e_s = Seconds(now - start_);
  out_->output_tokens = usage_tokens_.value_or(text_pieces_);
  out_->finish_reason = CombineFinishReasons(reasons_);
  if (failed_) return;
  if (!done_) {
    out_->status = "UNAVAILABLE";
    out_->error_message = "the event stream ended before data: [DONE]";
    return;
  }
  out_->ok = true;
  out_->status = "OK";
}

absl::StatusOr<std::unique_ptr<OpenAiBackend>> OpenAiBackend::Create(OpenAiOptions options) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(options.base_url);
  if (!url.ok()) return url.status();
  return std::unique_ptr<OpenAiBackend>(new OpenAiBackend(std::move(options), *std::move(url)));
}

absl::StatusOr<ModelFacts> OpenAiBackend::Connect() {
  httplib::Client client(url_.host, url_.port);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(10, 0);
  const std::string where = absl::StrCat("GET ", options_.base_url, "/v1/models");
  httplib::Result res = client.Get(Prefix(url_) + "/v1/models", Headers(options_.api_key));
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat(where, " failed: ", httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return absl::UnavailableError(absl::StrCat(where, " answered HTTP ", res->status, ": ",
                                               ErrorMessage(res->body)));
  }
  const json models = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  const json* first = nullptr;
  if (models.is_object() && models.contains("data") && models["data"].is_array() &&
      !models["data"].empty() && models["data"][0].is_object()) {
    first = &models["data"][0];
  }
  ModelFacts facts;
  if (options_.model_file) facts = *options_.model_file;
  model_ = options_.served_model_name;
  if (model_.empty()) {
    if (first == nullptr || !first->contains("id") || !(*first)["id"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " lists no model id; name the model with --served_model_name"));
    }
    model_ = (*first)["id"].get<std::string>();
  }
  facts.name = model_;
  if (first != nullptr && first->contains("max_model_len") &&
      (*first)["max_model_len"].is_number_integer()) {
    facts.max_model_len = (*first)["max_model_len"].get<int>();
  }
  if (options_.vocab_size > 0) facts.vocab_size = options_.vocab_size;
  if (options_.max_model_len > 0) facts.max_model_len = options_.max_model_len;
  if (facts.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "the openai backend needs the model's vocabulary size, which the HTTP API does not "
        "tell: give --model_file=PATH.gguf (the served model file) or --vocab_size=N");
  }
  if (facts.max_model_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " gives no max_model_len: give --max_model_len=N or --model_file=PATH.gguf"));
  }
  if (facts.special_ids.empty()) facts.special_ids = {0, 1, 2};  // Llama's unk, BOS, EOS
  return facts;
}

absl::Status OpenAiBackend::CanSend(const BenchRequest& request) const {
  if (request.beam_width > 0) {
    return absl::UnimplementedError(
        "beam search cannot be sent over the OpenAI HTTP API (Folio's /v1/completions has "
        "no beam option); run beam workloads with --backend=grpc");
  }
  return absl::OkStatus();
}

void OpenAiBackend::Run(const BenchRequest& request, std::optional<Clock::time_point> deadline,
                        RequestResult* out) {
  out->sent = true;
  out->prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  out->requested_output = request.output_len;
  out->n = request.n;
  out->beam_width = request.beam_width;
  httplib::Client client(url_.host, url_.port);
  client.set_connection_timeout(10, 0);
  long read_timeout_ms = 3600L * 1000;
  if (deadline) {
    read_timeout_ms = std::max<long>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count());
  }
  client.set_read_timeout(read_timeout_ms / 1000, (read_timeout_ms % 1000) * 1000);

  httplib::Request req;
  req.method = "POST";
  req.path = Prefix(url_) + "/v1/completions";
  req.headers = Headers(options_.api_key);
  req.headers.emplace("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = CompletionRequestBody(request, model_).dump();

  const Clock::time_point start = Clock::now();
  CompletionStream stream(start, out);
  int http_status = 0;
  std::string error_body;
  bool cut_off = false;
  req.response_handler = [&](const httplib::Response& res) {
    http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (http_status != 200) {
      if (error_body.size() < 64 * 1024) error_body.append(data, n);
      return true;
    }
    stream.OnBytes(absl::string_view(data, n), now);
    if (deadline && now >= *deadline && !stream.done()) {
      cut_off = true;
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  const Clock::time_point end = Clock::now();
  if (http_status == 200) {
    stream.Finish(end);
    if (!out->ok && (cut_off || (deadline && end >= *deadline))) {
      out->status = "DEADLINE_EXCEEDED";
      out->error_message = "the run's duration ended first";
    } else if (!out->ok && !sent && out->status == "UNAVAILABLE") {
      out->error_message = absl::StrCat("the connection failed mid-stream: ",
                                        httplib::to_string(error));
    }
    return;
  }
  out->e2e_s = Seconds(end - start);
  out->ok = false;
  if (http_status != 0) {
    out->status = absl::StrCat("HTTP_", http_status);
    out->error_message = ErrorMessage(error_body.empty() ? res.body : error_body);
  } else if (deadline && end >= *deadline) {
    out->status = "DEADLINE_EXCEEDED";
    out->error_message = "the run's duration ended first";
  } else {
    out->status = "UNAVAILABLE";
    out->error_message = absl::StrCat("POST ", options_.base_url, "/v1/completions failed: ",
                                      httplib::to_string(error));
  }
}

}  // namespace folio::bench
