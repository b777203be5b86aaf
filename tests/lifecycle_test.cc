// Every service's start-up, stopped or refused: SIGTERM in the middle of start-up (a
// worker loading its model, a scheduler or frontend waiting for peers that never come)
// exits at once, and a port another process listens on fails the start within seconds,
// naming the port (a worker says so before it loads its model). The bounds are loose:
// they tell "at once" from "after a timeout", not how fast.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_models_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service_process.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A socket listening on a free loopback port for the test's lifetime.
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on a loopback port";
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~TakenPort() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A named pipe as --model: opening it blocks until a writer comes (none does), which is a
// model load that never ends.
class EndlessModel {
 public:
  EndlessModel() {
    char tmpl[] = "/tmp/folio-lifecycle-XXXXXX";
    dir_ = mkdtemp(tmpl) != nullptr ? tmpl : "";
    path_ = dir_ + "/model.gguf";
    if (dir_.empty() || mkfifo(path_.c_str(), 0600) != 0) ADD_FAILURE() << "cannot make a fifo";
  }
  ~EndlessModel() {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

// Runs bin/<binary> with `args` under `timeout 30`; the exit code, output and wall time.
struct ServiceRun {
  int exit_code;
  std::string output;
  absl::Duration took;
};
ServiceRun RunService(const std::string& binary, const std::vector<std::string>& args) {
  const absl::Time start = absl::Now();
  testing::CommandResult r = testing::RunCommand(
      absl::StrCat("timeout 30 ", testing::BinDir(), "/", binary, " ", absl::StrJoin(args, " ")));
  return {r.exit_code, r.output, absl::Now() - start};
}

void ExpectRefusedNamingThePort(const ServiceRun& run, int port) {
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.exit_code, 124) << "still starting after 30 s:\n" << run.output;
  EXPECT_LT(run.took, absl::Seconds(5)) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat(port))) << "the port is not named";
}

// Sends SIGTERM `after` the start and expects exit status 0 within 2 s.
void ExpectSigtermExitsAtOnce(testing::ServiceProcess& p, absl::Duration after) {
  absl::SleepFor(after);
  p.Signal(SIGTERM);
  absl::StatusOr<int> exit_status = p.Wait(absl::Seconds(2));
  ASSERT_TRUE(exit_status.ok()) << "still running 2 s after SIGTERM: " << exit_status.status();
  EXPECT_EQ(*exit_status, 0);
}

TEST(LifecycleTest, AWorkerStopsAtOnceOnSigtermWhileItsModelLoads) {
  EndlessModel model;
  auto p = testing::ServiceProcess::Spawn(
      "folio-worker", {"--model=" + model.path(), "--port=0", "--metrics_port=-1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectSigtermExitsAtOnce(**p, absl::Milliseconds(500));
}

// Serving, a worker drains and exits 0. OpenBLAS's threads, started before main, take
// signals too: SIGTERM once killed the worker unhandled (exit by signal 15).
TEST(LifecycleTest, AServingWorkerExitsCleanlyOnSigterm) {
  auto p = testing::ServiceProcess::Start(
      "folio-worker", {"--port=0", "--metrics_port=-1", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectSigtermExitsAtOnce(**p, absl::Milliseconds(100));
}

TEST(LifecycleTest, ASchedulerStopsAtOnceOnSigtermWhileItWaitsForItsPeers) {
  auto p = testing::ServiceProcess::Start(
      "folio-scheduler", {"--cachemgr=127.0.0.1:1", "--workers=127.0.0.1:1", "--port=0",
                          "--metrics_port=-1", "--startup_timeout_s=300"});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectSigtermExitsAtOnce(**p, absl::Milliseconds(300));
}

TEST(LifecycleTest, AFrontendStopsAtOnceOnSigtermWhileItWaitsForTheScheduler) {
  auto p = testing::ServiceProcess::Start(
      "folio-frontend", {"--scheduler=127.0.0.1:1", "--port=0", "--metrics_port=-1",
                         "--http_port=0", "--startup_timeout_s=300", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectSigtermExitsAtOnce(**p, absl::Milliseconds(300));
}

TEST(LifecycleTest, AWorkerOnATakenPortSaysSoBeforeLoadingItsModel) {
  TakenPort taken;
  EndlessModel model;  // the load would never end: only a check before it answers
  const ServiceRun run = RunService("folio-worker", {"--model=" + model.path(),
                                              absl::StrCat("--port=", taken.port()),
                                              "--metrics_port=-1"});
  ExpectRefusedNamingThePort(run, taken.port());
  EXPECT_THAT(run.output, HasSubstr("in use"));
}

TEST(LifecycleTest, AWorkerOnATakenMetricsPortSaysSoBeforeLoadingItsModel) {
  TakenPort taken;
  EndlessModel model;
  const ServiceRun run = RunService("folio-worker", {"--model=" + model.path(), "--port=0",
                                              absl::StrCat("--metrics_port=", taken.port())});
  ExpectRefusedNamingThePort(run, taken.port());
}

// Speculative decoding's draft model must share the model's tokenizer, and runs on the
// CPU backend: a worker says which and exits, the placement before loading anything.
TEST(LifecycleTest, AWorkerRefusesADraftModelItCannotDraftWith) {
  const std::optional<std::string> dir = TestModelsDir();
  if (!dir) GTEST_SKIP() << "no test models (FOLIO_MODELS_DIR or FOLIO_BUILD_DIR)";
  const std::string stories = *dir + "/stories260K/stories260K.gguf";
  ServiceRun run = RunService("folio-worker", {"--model=" + stories, "--port=0",
                                               "--metrics_port=-1",
                                               "--draft_model=" + *dir + "/bench-28m-f16.gguf"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--draft_model"));
  EXPECT_THAT(run.output, HasSubstr("the draft model's vocabulary has"));
  EXPECT_THAT(run.output, HasSubstr("tokens, the model's 512"));
  EndlessModel model;  // refused before the load, which would never end
  run = RunService("folio-worker", {"--model=" + model.path(), "--port=0", "--metrics_port=-1",
                                    "--device=cuda", "--draft_model=" + stories});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("runs on the CPU backend only"));
}

TEST(LifecycleTest, ACacheManagerOnATakenPortFailsAtOnce) {
  TakenPort taken;
  ExpectRefusedNamingThePort(
      RunService("folio-cachemgr", {absl::StrCat("--port=", taken.port()), "--metrics_port=-1"}),
      taken.port());
}

TEST(LifecycleTest, ASchedulerOnATakenPortFailsAtOnce) {
  TakenPort taken;
  ExpectRefusedNamingThePort(
      RunService("folio-scheduler",
                 {"--cachemgr=127.0.0.1:1", "--workers=127.0.0.1:1", "--startup_timeout_s=300",
                  absl::StrCat("--port=", taken.port()), "--metrics_port=-1"}),
      taken.port());
}

TEST(LifecycleTest, AFrontendOnATakenHttpPortFailsAtOnce) {
  TakenPort taken;
  const ServiceRun run = RunService("folio-frontend",
                             {"--scheduler=127.0.0.1:1", "--startup_timeout_s=300", "--port=0",
                              "--metrics_port=-1", absl::StrCat("--http_port=", taken.port())});
  ExpectRefusedNamingThePort(run, taken.port());
  EXPECT_THAT(run.output, Not(HasSubstr("Check failed")));
}

}  // namespace
}  // namespace folio
