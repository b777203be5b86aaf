// folio-bench against a real local cluster (stories260K): a few seconds of load, then the
// result JSON is checked request by request.
#include <fstream>

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
  EXPECT_THAT(r.output, HasSubstr("Goodput (req/s) at e2e<=600000 ms"));
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

TEST(BenchCliTest, UnreachableServerAndBadFlagsAreClearErrors) {
  testing::CommandResult r =
      testing::RunCommand(Bench() + " --server=127.0.0.1:1 --num_requests=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("GetModelInfo at 127.0.0.1:1 failed: UNAVAILABLE"));
  r = testing::RunCommand(Bench() + " --request_rate=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--request_rate must be positive"));
  r = testing::RunCommand(Bench() + " --metrics_interval_ms=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--metrics_interval_ms must be positive"));
  r = testing::RunCommand(Bench() + " --goodput=ttft:fast");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bad --goodput 'ttft:fast'"));
}

}  // namespace
}  // namespace folio
