// folio-bench against a real local cluster (stories260K): a few seconds of load, then the
// result JSON is checked request by request.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cluster.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

std::string Bench() { return testing::BinDir() + "/folio-bench"; }

void ExpectOrderedPositive(const json& d, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_GT(d["mean"].get<double>(), 0);
  EXPECT_GT(d["p50"].get<double>(), 0);
  EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>());
  EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>());
}

class BenchSmokeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << testing::kModelsDirHelp;
    auto cluster = testing::Cluster::Start({.model = *dir_ + "/stories260K/stories260K.gguf"});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    json_path_ = ::testing::TempDir() + "/folio_bench_smoke.json";
    std::remove(json_path_.c_str());
  }
  json ReadResult() {
    std::ifstream in(json_path_);
    return json::parse(in);
  }
  std::optional<std::string> dir_;
  std::unique_ptr<testing::Cluster> cluster_;
  std::string json_path_;
};

TEST_F(BenchSmokeTest, FixedWorkloadEveryRequestCompletesWithItsLength) {
  const testing::CommandResult r = testing::RunCommand(
      Bench() + " --server=" + cluster_->frontend_process().address() +
      " --workload=fixed --input_len=8 --output_len=24 --num_requests=6 --request_rate=20"
      " --max_concurrency=3 --seed=3 --goodput=e2e:600000 --progress=false --result_json=" +
      json_path_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Output token throughput"));
  EXPECT_THAT(r.output, HasSubstr("(100.0% of sent within e2e<=600000 ms)"));
  const json s = ReadResult();
  EXPECT_EQ(s["num_requests"], 6);
  EXPECT_EQ(s["completed"], 6);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["total_output_tokens"], 6 * 24);
  for (const json& req : s["requests"]) {
    EXPECT_EQ(req["status"], "OK");
    EXPECT_EQ(req["prompt_tokens"], 8);
    EXPECT_EQ(req["output_tokens"], 24);
    EXPECT_EQ(req["finish_reason"], "length");
  }
  EXPECT_GT(s["request_throughput"].get<double>(), 0);
  EXPECT_GT(s["output_throughput"].get<double>(), 0);
  EXPECT_GT(s["normalized_latency_ms_per_token"].get<double>(), 0);
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms"}) {
    ExpectOrderedPositive(s[key], key);
  }
  EXPECT_LE(s["ttft_ms"]["p50"].get<double>(), s["e2e_latency_ms"]["p99"].get<double>());
  // Ten minutes per request: every one is within it.
  EXPECT_EQ(s["goodput"]["fraction"], 1.0);
  EXPECT_EQ(s["goodput"]["slo_ms"], json({{"e2e", 600000}}));
  EXPECT_DOUBLE_EQ(s["goodput"]["requests_per_s"].get<double>(),
                   s["request_throughput"].get<double>());
}

// Lengths the model cannot hold are cut to its max_model_len (512); the same seed gives
// the same requests.
TEST_F(BenchSmokeTest, ShareGptLikeRepeatsFromItsSeed) {
  json runs[2];
  for (json& run : runs) {
    const testing::CommandResult r = testing::RunCommand(
        Bench() + " --server=" + cluster_->frontend_process().address() +
        " --workload=sharegpt-like --max_input_len=32 --max_output_len=16 --num_requests=4"
        " --seed=5 --progress=false --result_json=" + json_path_);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    run = ReadResult();
  }
  EXPECT_EQ(runs[0]["completed"], 4);
  for (int i = 0; i < 4; ++i) {
    const json& a = runs[0]["requests"][i];
    EXPECT_EQ(a["output_tokens"], a["requested_output_tokens"]);
    EXPECT_LE(a["output_tokens"].get<int>(), 16);
    EXPECT_LE(a["prompt_tokens"].get<int>(), 32);
    EXPECT_EQ(a["prompt_tokens"], runs[1]["requests"][i]["prompt_tokens"]);
    EXPECT_EQ(a["requested_output_tokens"], runs[1]["requests"][i]["requested_output_tokens"]);
  }
}

// The same kind of run over Folio's OpenAI-compatible HTTP API: the vocabulary from the
// model file, the model name and max_model_len from /v1/models.
TEST_F(BenchSmokeTest, OpenAiBackendEveryRequestCompletesWithItsLength) {
  const std::string base_url =
      "http://127.0.0.1:" + std::to_string(cluster_->frontend_process().http_port());
  const testing::CommandResult r = testing::RunCommand(
      Bench() + " --backend=openai --base_url=" + base_url + " --model_file=" + *dir_ +
      "/stories260K/stories260K.gguf --workload=fixed --input_len=8 --output_len=24"
      " --num_requests=6 --max_concurrency=3 --seed=3 --goodput=ttft:600000,tpot:600000"
      " --progress=false --result_json=" + json_path_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json s = ReadResult();
  EXPECT_EQ(s["config"]["backend"], "openai");
  EXPECT_EQ(s["config"]["server"], base_url);
  EXPECT_EQ(s["completed"], 6) << s.dump(1);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["total_output_tokens"], 6 * 24);
  for (const json& req : s["requests"]) {
    EXPECT_EQ(req["status"], "OK");
    EXPECT_EQ(req["prompt_tokens"], 8);
    EXPECT_EQ(req["output_tokens"], 24);
    EXPECT_EQ(req["finish_reason"], "length");
  }
  for (const char* key : {"ttft_ms", "e2e_latency_ms"}) ExpectOrderedPositive(s[key], key);
  EXPECT_EQ(s["goodput"]["fraction"], 1.0);

  // A prompt longer than the model holds: every request fails with the server's 400.
  const testing::CommandResult too_long = testing::RunCommand(
      Bench() + " --backend=openai --base_url=" + base_url +
      " --vocab_size=512 --max_model_len=4096 --workload=fixed --input_len=600"
      " --output_len=4 --num_requests=2 --progress=false --result_json=" + json_path_);
  ASSERT_EQ(too_long.exit_code, 0) << too_long.output;
  const json t = ReadResult();
  EXPECT_EQ(t["failed"], 2);
  EXPECT_EQ(t["failures"]["HTTP_400"], 2) << t.dump(1);
  EXPECT_THAT(t["requests"][0]["error"].get<std::string>(), HasSubstr("max_model_len"));
}

// The cache manager's /metrics scraped during the run: samples with requests in flight
// show a pool in use.
TEST_F(BenchSmokeTest, ScrapesTheCacheManagersMetrics) {
  const std::string url =
      "http://127.0.0.1:" + std::to_string(cluster_->cachemgr_process().metrics_port()) +
      "/metrics";
  const testing::CommandResult r = testing::RunCommand(
      Bench() + " --server=" + cluster_->frontend_process().address() +
      " --workload=fixed --input_len=8 --output_len=200 --num_requests=4 --seed=1"
      " --metrics_url=" + url + " --metrics_interval_ms=10 --progress=false --result_json=" +
      json_path_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("folio_cachemgr_slot_utilization_ratio"));
  const json s = ReadResult();
  EXPECT_EQ(s["completed"], 4);
  const json& m = s["server_metrics"];
  EXPECT_EQ(m["urls"], json::array({url}));
  EXPECT_EQ(m["interval_s"], 0.01);
  EXPECT_GT(m["samples"].get<int>(), 0) << m.dump(1);
  ASSERT_EQ(m["series"].size(), m["samples"].get<size_t>());
  ASSERT_TRUE(m["gauges"].contains("folio_cachemgr_slot_utilization_ratio")) << m.dump(1);
  const json& util = m["gauges"]["folio_cachemgr_slot_utilization_ratio"];
  EXPECT_GT(util["mean"].get<double>(), 0) << m.dump(1);
  EXPECT_LE(util["mean"].get<double>(), 1);
  EXPECT_LE(util["max"].get<double>(), 1);
  EXPECT_GE(m["gauges"]["folio_cachemgr_blocks_capacity"]["min"].get<double>(), 1);
  EXPECT_LE(m["gauges"]["folio_cachemgr_sequences"]["max"].get<double>(), 4);
  for (const json& point : m["series"]) {
    EXPECT_GE(point["in_flight"].get<int>(), 0);
    EXPECT_LE(point["in_flight"].get<int>(), 4);
  }
}

// n > 1: every choice of every request runs to its length, and output tokens count them all.
TEST_F(BenchSmokeTest, ParallelSamplingAndBeamCompleteEveryChoice) {
  for (const std::string workload : {"parallel-sampling", "beam"}) {
    SCOPED_TRACE(workload);
    const testing::CommandResult r = testing::RunCommand(
        Bench() + " --server=" + cluster_->frontend_process().address() + " --workload=" +
        workload + " --max_input_len=16 --max_output_len=12 --num_requests=4 --seed=2"
        " --progress=false --result_json=" + json_path_);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json s = ReadResult();
    EXPECT_EQ(s["completed"], 4);
    EXPECT_EQ(s["failed"], 0);
    int total = 0;
    for (const json& req : s["requests"]) {
      EXPECT_EQ(req["status"], "OK");
      const int n = req["n"].get<int>();
      EXPECT_GE(n, 2);
      EXPECT_LE(n, 6);
      if (workload == "beam") {
        EXPECT_EQ(req["beam_width"], n);
      } else {
        EXPECT_FALSE(req.contains("beam_width"));
      }
      EXPECT_EQ(req["output_tokens"].get<int>(), n * req["requested_output_tokens"].get<int>());
      EXPECT_EQ(req["finish_reason"], "length");
      total += req["output_tokens"].get<int>();
    }
    EXPECT_EQ(s["total_output_tokens"], total);
  }
}

TEST(BenchCliTest, UnreachableServerAndBadFlagsAreClearErrors) {
  struct Case {
    std::string flags;
    int exit_code;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"--server=127.0.0.1:1 --num_requests=1", 1,
       {"GetModelInfo at 127.0.0.1:1 failed: UNAVAILABLE"}},
      {"--request_rate=0", 2, {"--request_rate must be positive"}},
      {"--metrics_interval_ms=0", 2, {"--metrics_interval_ms must be positive"}},
      {"--backend=openai --base_url=http://127.0.0.1:1", 1,
       {"GET http://127.0.0.1:1/v1/models failed"}},
      {"--backend=openai", 2, {"--backend=openai needs --base_url"}},
      {"--backend=openai --base_url=localhost:8000", 2, {"--base_url: bad URL 'localhost:8000'"}},
      {"--backend=openai --base_url=http://127.0.0.1:1 --model_file=/no/such.gguf", 2,
       {"--model_file:", "/no/such.gguf"}},
      {"--backend=rest", 2, {"--backend must be grpc or openai"}},
      {"--goodput=ttft:fast", 2, {"bad --goodput 'ttft:fast'"}},
  };
  for (const Case& c : cases) {
    const testing::CommandResult r = testing::RunCommand(Bench() + " " + c.flags);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.flags << "\n" << r.output;
    for (const std::string& text : c.says) EXPECT_THAT(r.output, HasSubstr(text)) << c.flags;
  }
}

}  // namespace
}  // namespace folio
