// ServiceProcess: starts a Folio service binary as a child process for cross-service
// tests, finds its ports through --port_file, and stops it with a signal. Thread-compatible.
#ifndef FOLIO_TESTS_SERVICE_PROCESS_H_
#define FOLIO_TESTS_SERVICE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace folio::testing {

// The folder holding the built binaries: $FOLIO_BUILD_DIR/bin (set by ctest).
std::string BinDir();

class ServiceProcess {
 public:
  // Starts bin_dir/<binary> with `args` plus --port_file, and waits until the port file
  // appears (the service listens) or `timeout` passes.
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> Start(
      const std::string& binary, std::vector<std::string> args,
      absl::Duration timeout = absl::Seconds(30));
  // Starts it without waiting for the port file: for tests of start-up itself (a service
  // that never listens, or is stopped before it does). The ports stay unknown.
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> Spawn(const std::string& binary,
                                                               std::vector<std::string> args);
  ~ServiceProcess();  // SIGKILL if still running

  // Starts the binary again with the same arguments and the same ports, as Kubernetes
  // restarts a container in place (SIGKILL first if it still runs), and waits until it
  // listens. The process's incarnation is new; its address is the same. `extra_args` come
  // after the first start's (later flags win) for this start only: a container restarted
  // with changed settings.
  absl::Status Restart(absl::Duration timeout = absl::Seconds(30),
                       std::vector<std::string> extra_args = {});

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  // The "http_port" of the port file (the frontend's HTTP API), or -1 when absent.
  int http_port() const { return http_port_; }
  std::string address() const;
  pid_t pid() const { return pid_; }

  void Signal(int sig);
  // Waits for exit and returns the exit status (or -signal), or DeadlineExceeded.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  // Spawns binary_ with args_ (plus --port_file) and waits for the port file (not when
  // `timeout` is zero).
  absl::Status Launch(const std::vector<std::string>& extra_args, absl::Duration timeout);

  std::string binary_;
  std::vector<std::string> args_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int http_port_ = -1;
  std::string dir_;
};

// GET http://127.0.0.1:port/path; empty on failure.
std::string HttpGet(int port, const std::string& path);

// Runs a shell command, returning its exit code and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

}  // namespace folio::testing

#endif  // FOLIO_TESTS_SERVICE_PROCESS_H_
