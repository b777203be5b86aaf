// folio-cli: a command-line client of the public API (folio.v1.TextGeneration) and of
// grpc.health.v1. See kUsage.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/finish_reason.h"
#include "common/grpc_status.h"
#include "common/process.h"
#include "common/tls.h"
#include "folio/v1/folio.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, server, "localhost:50051", "Address (HOST:PORT) of folio-frontend.");
ABSL_FLAG(std::string, api_key, "",
          "The API key of a frontend started with --api_key (sent as authorization: Bearer "
          "KEY); default: $FOLIO_API_KEY.");
ABSL_FLAG(int, max_tokens, 100, "generate: tokens to generate at most.");
ABSL_FLAG(std::optional<float>, temperature, std::nullopt,
          "generate: sampling temperature in [0, 2]; 0 is greedy. Unset: the server's default, "
          "1.0, as over HTTP and in folio-run.");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt,
          "generate: nucleus sampling mass in (0, 1]. Unset: the server's default (1).");
ABSL_FLAG(std::optional<int>, top_k, std::nullopt,
          "generate: keep the k most likely tokens. Unset: the server's default (0, off).");
ABSL_FLAG(std::optional<float>, min_p, std::nullopt,
          "generate: drop tokens below min_p times the top probability. Unset: off.");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "generate: sampling seed. Unset: the server picks a random one.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "generate: stop strings, comma-separated (--stop=.,!). The completion ends before "
          "the first one and does not include it.");
ABSL_FLAG(std::optional<int>, logprobs, std::nullopt,
          "generate: report this many top alternatives per token (0 to 20; --json only).");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep generating past end-of-sequence.");
ABSL_FLAG(int, n, 1,
          "generate: choices to return (parallel samples sharing the prompt's KV blocks; "
          "with --beam, the best n beams). Each choice is printed once done, as [INDEX] TEXT.");
ABSL_FLAG(int, beam, 0, "generate: beam search with this many beams (0: sampling).");
ABSL_FLAG(std::optional<float>, length_penalty, std::nullopt,
          "generate: beam search ranks finished beams by cumulative log-prob / "
          "length^length_penalty (server default 1.0).");
ABSL_FLAG(bool, unary, false,
          "generate: use the unary Complete RPC (prints the text once done) instead of the "
          "streaming Generate RPC.");
ABSL_FLAG(std::string, request_id, "",
          "generate: request id to send (appears in every server log line). Unset: the "
          "frontend generates one.");
ABSL_FLAG(std::string, add_bos, "",
          "tokenize: true or false to prepend the BOS token or not; unset: the model's own "
          "rule, as generation tokenizes a prompt.");
ABSL_FLAG(std::string, service, "",
          "health: the service name to check; empty (default) is the whole server.");
ABSL_FLAG(bool, json, false,
          "Print one JSON object instead of plain text (generate: text, token_ids, "
          "finish_reason, usage, request_id; tokenize: token_ids, pieces; model: every "
          "field; health: status).");
ABSL_FLAG(double, timeout_s, 0, "Deadline of each RPC in seconds; 0 means none.");

namespace {

namespace pb = folio::v1;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using nlohmann::json;

constexpr char kUsage[] =
    "a command-line client of folio-frontend.\n"
    "\n"
    "Usage: folio-cli COMMAND [ARG] [--flags]\n"
    "\n"
    "Commands:\n"
    "  generate PROMPT  Generate a completion of PROMPT and print its text as it arrives\n"
    "                   (--json: one JSON object with text, token_ids, finish_reason,\n"
    "                   usage and request_id once done). Sampling flags: --max_tokens\n"
    "                   (default 100), --temperature (default 1.0; 0 is greedy), --top_p, --top_k,\n"
    "                   --min_p, --seed, --stop, --logprobs, --ignore_eos; --n=N for N\n"
    "                   choices, --beam=K (--length_penalty) for beam search: each choice\n"
    "                   prints once done as [INDEX] TEXT (--json: a choices list);\n"
    "                   --unary uses the Complete RPC.\n"
    "  tokenize TEXT    Print the token ids and pieces of TEXT, one token per line\n"
    "                   (--add_bos=false to leave out BOS).\n"
    "  model            Print the served model (GetModelInfo).\n"
    "  health           grpc.health.v1 Check: prints SERVING, NOT_SERVING, ...;\n"
    "                   exits 0 only when SERVING.\n"
    "\n"
    "Every command talks to --server (default localhost:50051). When the server answers\n"
    "with an error, folio-cli prints its code and message on stderr and exits 1; bad\n"
    "command-line usage exits 2.\n"
    "\n"
    "Examples:\n"
    "  folio-cli generate \"Once upon a time\" --max_tokens=50\n"
    "  folio-cli generate \"Once upon a time\" --temperature=0.8 --seed=7 --stop=. --json\n"
    "  folio-cli generate \"Once upon a time\" --temperature=0.8 --n=4\n"
    "  folio-cli generate \"Once upon a time\" --beam=4 --max_tokens=32\n"
    "  folio-cli tokenize \"Hello world\"\n";

constexpr int kExitOk = 0;
constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;

int UsageError(const std::string& message) {
  std::cerr << "folio-cli: " << message << "\nRun folio-cli --help for usage.\n";
  return kExitUsage;
}

int RpcError(const char* what, const grpc::Status& status) {
  std::cerr << "folio-cli: " << what
            << " failed: " << absl::StatusCodeToString(folio::FromGrpcStatus(status).code()) << ": "
            << status.error_message() << "\n";
  return kExitRpcError;
}

// Every call's deadline, and its API key when one is given (--api_key, else $FOLIO_API_KEY).
void SetDeadline(grpc::ClientContext* ctx) {
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (timeout_s > 0) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(timeout_s)));
  }
  std::string key = absl::GetFlag(FLAGS_api_key);
  if (key.empty()) {
    if (const char* env = std::getenv("FOLIO_API_KEY"); env != nullptr) key = env;
  }
  if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
}

pb::GenerateRequest BuildRequest(const std::string& prompt) {
  pb::GenerateRequest request;
  request.set_prompt(prompt);
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  pb::SamplingOptions* s = request.mutable_sampling();
  s->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  if (auto v = absl::GetFlag(FLAGS_temperature)) s->set_temperature(*v);
  if (auto v = absl::GetFlag(FLAGS_top_p)) s->set_top_p(*v);
  if (auto v = absl::GetFlag(FLAGS_top_k)) s->set_top_k(*v);
  if (auto v = absl::GetFlag(FLAGS_min_p)) s->set_min_p(*v);
  if (auto v = absl::GetFlag(FLAGS_seed)) s->set_seed(*v);
  if (auto v = absl::GetFlag(FLAGS_logprobs)) s->set_logprobs(*v);
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) s->add_stop(stop);
  s->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  if (absl::GetFlag(FLAGS_n) != 1) s->set_n(absl::GetFlag(FLAGS_n));
  if (absl::GetFlag(FLAGS_beam) != 0) s->set_beam_width(absl::GetFlag(FLAGS_beam));
  if (auto v = absl::GetFlag(FLAGS_length_penalty)) s->set_length_penalty(*v);
  return request;
}

// The completion gathered for --json.
struct Completion {
  std::string text;
  std::string request_id;
  json tokens = json::array();
  std::vector<int32_t> token_ids;
  pb::FinishReason finish_reason = pb::FINISH_REASON_UNSPECIFIED;
  pb::Usage usage;
  double cumulative_logprob = 0.0;

  void Add(const std::string& delta,
           const google::protobuf::RepeatedPtrField<pb::TokenInfo>& infos) {
    text += delta;
    for (const pb::TokenInfo& t : infos) {
      token_ids.push_back(t.token_id());
      json token = {{"token_id", t.token_id()}, {"logprob", t.logprob()}};
      json top = json::array();
      for (const pb::TokenLogprob& alt : t.top_logprobs()) {
        top.push_back(
            {{"token_id", alt.token_id()}, {"token", alt.token()}, {"logprob", alt.logprob()}});
      }
      token["top_logprobs"] = top;
      tokens.push_back(token);
    }
  }

  json ToJson() const {
    json out = {{"request_id", request_id},
                {"text", text},
                {"token_ids", token_ids},
                {"finish_reason", folio::FinishReasonName(finish_reason)},
                {"usage",
                 {{"prompt_tokens", usage.prompt_tokens()},
                  {"completion_tokens", usage.completion_tokens()},
                  {"cached_prompt_tokens", usage.cached_prompt_tokens()}}}};
    if (absl::GetFlag(FLAGS_logprobs).has_value()) out["tokens"] = tokens;
    return out;
  }
};

json UsageJson(const pb::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.completion_tokens()},
          {"cached_prompt_tokens", usage.cached_prompt_tokens()}};
}

int Generate(pb::TextGeneration::Stub* stub, const std::string& prompt) {
  const pb::GenerateRequest request = BuildRequest(prompt);
  const bool as_json = absl::GetFlag(FLAGS_json);
  // One choice streams its text as it arrives; several (or beam search) print each
  // choice once the request is done.
  const bool several = absl::GetFlag(FLAGS_n) != 1 || absl::GetFlag(FLAGS_beam) != 0;
  std::map<int32_t, Completion> choices;
  std::string request_id;
  pb::Usage usage;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  if (absl::GetFlag(FLAGS_unary)) {
    pb::CompleteResponse response;
    grpc::Status status = stub->Complete(&ctx, request, &response);
    if (!status.ok()) return RpcError("generate", status);
    request_id = response.request_id();
    usage = response.usage();
    for (const pb::Choice& c : response.choices()) {
      Completion& completion = choices[c.index()];
      completion.Add(c.text(), c.tokens());
      completion.finish_reason = c.finish_reason();
      completion.cumulative_logprob = c.cumulative_logprob();
    }
    if (!as_json && !several) std::cout << response.text();
  } else {
    std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader =
        stub->Generate(&ctx, request);
    pb::GenerateResponse response;
    while (reader->Read(&response)) {
      Completion& completion = choices[response.index()];
      completion.Add(response.text(), response.tokens());
      request_id = response.request_id();
      if (response.finish_reason() != pb::FINISH_REASON_UNSPECIFIED) {
        completion.finish_reason = response.finish_reason();
        completion.cumulative_logprob = response.cumulative_logprob();
      }
      if (response.has_usage()) usage = response.usage();
      if (!as_json && !several) std::cout << response.text() << std::flush;
    }
    grpc::Status status = reader->Finish();
    if (!status.ok()) {
      if (!as_json && !several && !choices[0].text.empty()) std::cout << "\n";
      return RpcError("generate", status);
    }
  }
  for (auto& [index, c] : choices) {
    c.request_id = request_id;
    c.usage = usage;
  }
  if (as_json && !several) {
    std::cout << choices[0].ToJson().dump() << "\n";
  } else if (as_json) {
    json list = json::array();
    for (const auto& [index, c] : choices) {
      json one = c.ToJson();
      one.erase("usage");
      one.erase("request_id");
      one["index"] = index;
      if (absl::GetFlag(FLAGS_beam) != 0) one["cumulative_logprob"] = c.cumulative_logprob;
      list.push_back(one);
    }
    std::cout << json{{"request_id", request_id}, {"choices", list}, {"usage", UsageJson(usage)}}
                     .dump()
              << "\n";
  } else if (several) {
    for (const auto& [index, c] : choices) {
      std::cout << "[" << index << "]";
      if (absl::GetFlag(FLAGS_beam) != 0) {
        std::cout << " (cumulative logprob " << c.cumulative_logprob << ")";
      }
      std::cout << " " << c.text << "\n";
    }
  } else {
    std::cout << "\n";
  }
  return kExitOk;
}

int Tokenize(pb::TextGeneration::Stub* stub, const std::string& text) {
  pb::TokenizeRequest request;
  request.set_text(text);
  // Only an explicit --add_bos overrides the model's rule.
  if (const std::string add_bos = absl::GetFlag(FLAGS_add_bos); !add_bos.empty()) {
    bool value = false;
    if (!absl::SimpleAtob(add_bos, &value)) {
      std::cerr << "--add_bos must be true or false, not \"" << add_bos << "\"\n";
      return kExitUsage;
    }
    request.set_add_bos(value);
  }
  pb::TokenizeResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status status = stub->Tokenize(&ctx, request, &response);
  if (!status.ok()) return RpcError("tokenize", status);
  if (absl::GetFlag(FLAGS_json)) {
    json out = {
        {"token_ids",
         std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end())},
        {"pieces", std::vector<std::string>(response.pieces().begin(), response.pieces().end())}};
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  for (int i = 0; i < response.token_ids_size(); ++i) {
    std::cout << response.token_ids(i) << "\t"
              << (i < response.pieces_size() ? response.pieces(i) : "") << "\n";
  }
  return kExitOk;
}

int Model(pb::TextGeneration::Stub* stub) {
  pb::ModelInfo info;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status status = stub->GetModelInfo(&ctx, pb::GetModelInfoRequest(), &info);
  if (!status.ok()) return RpcError("model", status);
  const json out = {{"name", info.name()},
                    {"architecture", info.architecture()},
                    {"stored_type", info.stored_type()},
                    {"vocab_size", info.vocab_size()},
                    {"max_model_len", info.max_model_len()},
                    {"bos_id", info.bos_id()},
                    {"eos_id", info.eos_id()},
                    {"num_layers", info.num_layers()},
                    {"dim", info.dim()},
                    {"block_size", info.block_size()},
                    {"num_kv_blocks", info.num_kv_blocks()}};
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  for (const auto& [key, value] : out.items()) std::cout << key << ": " << value << "\n";
  return kExitOk;
}

int Health(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  HealthCheckResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status status = stub->Check(&ctx, request, &response);
  if (!status.ok()) return RpcError("health check", status);
  const std::string name = HealthCheckResponse::ServingStatus_Name(response.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << json{{"status", name}}.dump() << "\n";
  } else {
    std::cout << name << "\n";
  }
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitRpcError;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = folio::InitProcess(argc, argv, kUsage);
  if (args.size() < 2) return UsageError("no command given");
  const std::string command = args[1];
  folio::ExitIfCheckingFlags();
  // --tls_cert/--tls_key/--tls_ca (common/tls.h) as the services take them.
  auto channel =
      folio::MakeChannel(absl::GetFlag(FLAGS_server), folio::TlsConfigFromFlagsOrExit()).value();
  auto stub = pb::TextGeneration::NewStub(channel);
  if (command == "generate" || command == "tokenize") {
    if (args.size() != 3) {
      return UsageError(command + " takes exactly one argument (quote it if it has spaces)");
    }
    return command == "generate" ? Generate(stub.get(), args[2]) : Tokenize(stub.get(), args[2]);
  }
  if (command == "model" || command == "health") {
    if (args.size() != 2) return UsageError(command + " takes no arguments");
    return command == "model" ? Model(stub.get()) : Health(channel);
  }
  return UsageError("unknown command '" + command + "'");
}
