#include "tests/prometheus_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace folio::testing {
namespace {

// A port that was free a moment ago. Prometheus binds it shortly after; a clash shows up
// as a start-up failure with Prometheus's own message.
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot bind a loopback port");
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace

std::optional<std::string> FindPrometheus() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/prometheus");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    const std::string& binary, const std::map<std::string, int>& targets,
    absl::Duration timeout) {
  auto server = std::unique_ptr<PrometheusServer>(new PrometheusServer());
  char tmpl[] = "/tmp/folio-prometheus-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  server->dir_ = tmpl;
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  server->port_ = *port;

  const std::string config = server->dir_ + "/prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
           "scrape_configs:\n";
    for (const auto& [job, target_port] : targets) {
      out << "  - job_name: " << job << "\n    static_configs:\n      - targets: ['127.0.0.1:"
          << target_port << "']\n";
    }
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", config));
  }
  std::vector<std::string> args = {
      binary,
      "--config.file=" + config,
      "--storage.tsdb.path=" + server->dir_ + "/data",
      absl::StrCat("--web.listen-address=127.0.0.1:", server->port_),
      "--log.level=warn",
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = server->dir_ + "/prometheus.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&server->pid_, binary.c_str(), &actions, nullptr, argv.data(),
                             environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    server->pid_ = -1;
    return absl::NotFoundError(absl::StrCat("cannot start ", binary));
  }

  httplib::Client client("127.0.0.1", server->port_);
  client.set_connection_timeout(1);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    auto res = client.Get("/-/ready");
    if (res && res->status == 200) return server;
    int status = 0;
    if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("prometheus exited during start-up:\n", server->LogTail()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("prometheus not ready after ", absl::FormatDuration(timeout), ":\n",
                   server->LogTail()));
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  if (!dir_.empty()) std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
}

absl::StatusOr<std::optional<double>> PrometheusServer::Query(const std::string& promql) {
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  auto res = client.Post("/api/v1/query", httplib::Params{{"query", promql}});
  if (!res) return absl::UnavailableError("no answer from prometheus");
  nlohmann::json body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InternalError(absl::StrCat("not JSON: ", res->body));
  }
  if (body.value("status", "") != "success") {
    return absl::InvalidArgumentError(
        absl::StrCat("query ", promql, " failed: ", body.value("error", res->body)));
  }
  const nlohmann::json& data = body["data"];
  const std::string type = data.value("resultType", "");
  const nlohmann::json* value = nullptr;
  if (type == "vector") {
    if (data["result"].empty()) return std::optional<double>();
    value = &data["result"][0]["value"];
  } else if (type == "scalar") {
    value = &data["result"];
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unexpected result type ", type));
  }
  // A sample is [unix_time, "value"].
  double v = 0;
  if (!value->is_array() || value->size() != 2 || !(*value)[1].is_string() ||
      !absl::SimpleAtod((*value)[1].get<std::string>(), &v)) {
    return absl::InternalError(absl::StrCat("bad sample in ", res->body));
  }
  return std::optional<double>(v);
}

std::optional<double> PrometheusServer::WaitForAtLeast(const std::string& promql,
                                                       double at_least,
                                                       absl::Duration timeout) {
  std::optional<double> last;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::optional<double>> v = Query(promql);
    if (v.ok() && v->has_value()) last = *v;
    if (last.has_value() && *last >= at_least) return last;
    if (absl::Now() > deadline) return last;
    absl::SleepFor(absl::Milliseconds(500));
  }
}

std::string PrometheusServer::LogTail() const {
  std::ifstream in(dir_ + "/prometheus.log");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
}

}  // namespace folio::testing
