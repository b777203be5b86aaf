// Folio as Prometheus sees it: a real Prometheus server on loopback scrapes a local
// cluster, and queries through its HTTP API show the request and token counters moving.
// Also checks that docs/metrics.md names every metric the running cluster exposes.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/prometheus_server.h"

namespace folio {
namespace {

using testing::Cluster;
using testing::ClusterOptions;
using testing::PrometheusServer;
namespace v1 = folio::v1;

std::unique_ptr<Cluster> StartCluster(const std::string& models_dir) {
  ClusterOptions options;
  options.model = models_dir + "/stories260K/stories260K.gguf";
  auto cluster = Cluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// Streams one greedy completion; returns the tokens the final usage reports, or -1.
int GenerateTokens(v1::TextGeneration::Stub& stub, const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  int completion_tokens = -1;
  while (reader->Read(&resp)) {
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      completion_tokens = resp.usage().completion_tokens();
    }
  }
  return reader->Finish().ok() ? completion_tokens : -1;
}

double ValueOr0(PrometheusServer& prometheus, const std::string& promql) {
  absl::StatusOr<std::optional<double>> v = prometheus.Query(promql);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() && v->has_value() ? **v : 0;
}

TEST(PrometheusTest, RequestAndTokenCountersMoveInPrometheus) {
  const std::optional<std::string> models = testing::ModelsDir();
  if (!models) GTEST_SKIP() << testing::kModelsDirHelp;
  const std::optional<std::string> binary = testing::FindPrometheus();
  if (!binary) {
    GTEST_SKIP() << "no prometheus binary on PATH (Debian package prometheus; ./folio deps "
                    "installs it)";
  }
  auto cluster = StartCluster(*models);
  ASSERT_NE(cluster, nullptr);
  auto prometheus = PrometheusServer::Start(
      *binary, {{"folio-frontend", cluster->frontend_process().metrics_port()},
                {"folio-scheduler", cluster->scheduler_process().metrics_port()},
                {"folio-cachemgr", cluster->cachemgr_process().metrics_port()},
                {"folio-worker", cluster->worker_process().metrics_port()}});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  PrometheusServer& prom = **prometheus;

  // Every target scraped and up, and every service reports SERVING through its metrics.
  std::optional<double> up = prom.WaitForAtLeast("count(up == 1)", 4, absl::Seconds(60));
  ASSERT_TRUE(up.has_value()) << prom.LogTail();
  ASSERT_EQ(*up, 4) << prom.LogTail();
  EXPECT_EQ(prom.WaitForAtLeast("sum(folio_health_serving)", 4, absl::Seconds(30)), 4);
  EXPECT_EQ(ValueOr0(prom, "count(folio_build_info)"), 4);

  const double requests_before =
      ValueOr0(prom, "sum(folio_frontend_requests_total{method=\"Generate\",code=\"OK\"})");
  const double generated_before = ValueOr0(prom, "sum(folio_scheduler_generation_tokens_total)");
  const double prompt_before = ValueOr0(prom, "sum(folio_scheduler_prompt_tokens_total)");
  const double streamed_before = ValueOr0(prom, "sum(folio_frontend_streamed_tokens_total)");

  int completion_tokens = 0;
  for (const char* prompt : {"Once upon a time", "The little dog", "One day, a girl"}) {
    const int n = GenerateTokens(cluster->frontend(), prompt, 16);
    ASSERT_GT(n, 0) << prompt;
    completion_tokens += n;
  }

  // Counters reach Prometheus on a later scrape; wait for them, then check exact moves.
  const std::optional<double> requests = prom.WaitForAtLeast(
      "sum(folio_frontend_requests_total{method=\"Generate\",code=\"OK\"})", requests_before + 3,
      absl::Seconds(60));
  ASSERT_TRUE(requests.has_value()) << prom.LogTail();
  EXPECT_EQ(*requests, requests_before + 3);
  EXPECT_EQ(prom.WaitForAtLeast("sum(folio_frontend_streamed_tokens_total)",
                                streamed_before + completion_tokens, absl::Seconds(60)),
            streamed_before + completion_tokens);
  EXPECT_EQ(prom.WaitForAtLeast("sum(folio_scheduler_generation_tokens_total)",
                                generated_before + completion_tokens, absl::Seconds(60)),
            generated_before + completion_tokens);
  const std::optional<double> prompt_tokens = prom.WaitForAtLeast(
      "sum(folio_scheduler_prompt_tokens_total)", prompt_before + 3, absl::Seconds(60));
  ASSERT_TRUE(prompt_tokens.has_value());
  EXPECT_GE(*prompt_tokens, prompt_before + 3) << "each prompt has at least one token";

  // The PromQL the dashboard and the alert rules lean on evaluates over real series.
  EXPECT_GT(ValueOr0(prom, "sum(rate(folio_scheduler_generation_tokens_total[1m]))"), 0);
  EXPECT_GT(ValueOr0(prom, "sum(folio_scheduler_time_to_first_token_seconds_count)"), 0);
  const std::optional<double> rpc = prom.WaitForAtLeast(
      "sum(folio_scheduler_rpc_duration_seconds_count{service=\"worker\"})", 1,
      absl::Seconds(30));
  EXPECT_TRUE(rpc.has_value() && *rpc >= 1);
  absl::StatusOr<std::optional<double>> kv = prom.Query("max(folio_scheduler_kv_usage_ratio)");
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE(kv->has_value());
  EXPECT_GE(**kv, 0);
  EXPECT_LE(**kv, 1);
}

// The metric names a /metrics page declares (its # HELP lines).
std::set<std::string> DeclaredMetrics(const std::string& page) {
  std::set<std::string> names;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) != 0) continue;
    const size_t end = line.find(' ', 7);
    names.insert(line.substr(7, end == std::string::npos ? std::string::npos : end - 7));
  }
  return names;
}

TEST(MetricsDocTest, DocsMetricsMdNamesEveryMetricTheClusterExposes) {
  const std::optional<std::string> models = testing::ModelsDir();
  if (!models) GTEST_SKIP() << testing::kModelsDirHelp;
  std::ifstream in(std::string(FOLIO_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in) << "cannot read docs/metrics.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();

  auto cluster = StartCluster(*models);
  ASSERT_NE(cluster, nullptr);
  std::set<std::string> exposed;
  for (testing::ServiceProcess* p :
       {&cluster->frontend_process(), &cluster->scheduler_process(),
        &cluster->cachemgr_process(), &cluster->worker_process()}) {
    const std::string page = testing::HttpGet(p->metrics_port(), "/metrics");
    ASSERT_FALSE(page.empty()) << "no /metrics on port " << p->metrics_port();
    std::set<std::string> names = DeclaredMetrics(page);
    exposed.insert(names.begin(), names.end());
  }
  ASSERT_GT(exposed.size(), 40u);
  for (const std::string& name : exposed) {
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
        << name << " is exposed but not in docs/metrics.md (run tools/metrics_doc.py)";
  }
}

}  // namespace
}  // namespace folio
