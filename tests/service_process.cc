#include "tests/service_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"

extern char** environ;

namespace folio::testing {

std::string BinDir() {
  const char* dir = std::getenv("FOLIO_BUILD_DIR");
  return absl::StrCat(dir ? dir : "build", "/bin");
}

absl::StatusOr<std::unique_ptr<ServiceProcess>> ServiceProcess::Start(
    const std::string& binary, std::vector<std::string> args, absl::Duration timeout) {
  auto proc = std::make_unique<ServiceProcess>();
  char tmpl[] = "/tmp/folio-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  proc->dir_ = tmpl;
  proc->binary_ = binary;
  proc->args_ = std::move(args);
  if (absl::Status s = proc->Launch({}, timeout); !s.ok()) return s;
  return proc;
}

absl::StatusOr<std::unique_ptr<ServiceProcess>> ServiceProcess::Spawn(
    const std::string& binary, std::vector<std::string> args) {
  return Start(binary, std::move(args), absl::ZeroDuration());
}

absl::Status ServiceProcess::Restart(absl::Duration timeout,
                                     std::vector<std::string> extra_args) {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Later flags win: the same ports as the first start.
  std::vector<std::string> same_ports = {absl::StrCat("--port=", grpc_port_),
                                         absl::StrCat("--metrics_port=", metrics_port_)};
  if (http_port_ > 0) same_ports.push_back(absl::StrCat("--http_port=", http_port_));
  same_ports.insert(same_ports.end(), extra_args.begin(), extra_args.end());
  return Launch(same_ports, timeout);
}

absl::Status ServiceProcess::Launch(const std::vector<std::string>& extra_args,
                                    absl::Duration timeout) {
  const std::string port_file = dir_ + "/ports.json";
  std::remove(port_file.c_str());
  const std::string path = absl::StrCat(BinDir(), "/", binary_);
  std::vector<std::string> args = args_;
  args.insert(args.begin(), path);
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  args.push_back("--port_file=" + port_file);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawn(&pid_, path.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    pid_ = -1;
    return absl::NotFoundError(absl::StrCat("cannot start ", path));
  }
  if (timeout == absl::ZeroDuration()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    std::stringstream text;
    text << in.rdbuf();
    std::smatch m;
    const std::string s = text.str();
    if (std::regex_search(s, m, std::regex(R"re("grpc_port": (\d+), "metrics_port": (-?\d+))re"))) {
      grpc_port_ = std::stoi(m[1]);
      metrics_port_ = std::stoi(m[2]);
      if (std::regex_search(s, m, std::regex(R"re("http_port": (-?\d+))re"))) {
        http_port_ = std::stoi(m[1]);
      }
      return absl::OkStatus();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat(binary_, " exited during start-up"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(binary_, " did not start in time"));
}

ServiceProcess::~ServiceProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) std::system(absl::StrCat("rm -rf ", dir_).c_str());
}

std::string ServiceProcess::address() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

void ServiceProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

absl::StatusOr<int> ServiceProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError("process did not exit in time");
}

std::string HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  auto res = client.Get(path.c_str());
  return res && res->status == 200 ? res->body : "";
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace folio::testing
