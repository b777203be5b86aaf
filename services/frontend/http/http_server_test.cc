// HttpServer alone, with small handlers, over loopback sockets: keep-alive, the limits and
// timeouts, the close callback, a stream cut for a slow reader, a burst of connections,
// and HTTPS (with and without client certificates) using certificates made by openssl.
#include "services/frontend/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "httplib.h"  // the clients (its pkg-config flags turn on its TLS support)

namespace folio::frontend {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until the peer closes (returns what came) or `timeout` passes (sets *timed_out).
std::string ReadUntilClosed(int fd, absl::Duration timeout, bool* timed_out,
                            bool* reset = nullptr) {
  std::string out;
  const absl::Time end = absl::Now() + timeout;
  *timed_out = false;
  if (reset) *reset = false;
  char buf[65536];
  while (true) {
    const int64_t left_ms = absl::ToInt64Milliseconds(end - absl::Now());
    if (left_ms <= 0) {
      *timed_out = true;
      return out;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && reset) *reset = errno == ECONNRESET;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string Get(const std::string& path, bool close_after = false) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n",
                      close_after ? "Connection: close\r\n" : "", "\r\n");
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = {}) {
    options.port = 0;
    auto server = HttpServer::Start(std::move(options), [this](HttpRequest req,
                                                               std::shared_ptr<HttpExchange> x) {
      Handle(std::move(req), std::move(x));
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    for (std::thread& t : threads_) t.join();
  }

  void Handle(HttpRequest req, std::shared_ptr<HttpExchange> x) {
    if (req.path == "/echo") {
      HttpResponse r;
      r.content_type = "text/plain";
      r.body = absl::StrCat(req.method, " ", req.body.size(), " ",
                            std::string(req.header("x-test").value_or("-")));
      return x->Respond(std::move(r));
    }
    if (req.path == "/hang") {
      // Answers only when the client goes away: the close callback must run.
      x->OnClose([this] { closed_.Notify(); });
      hung_ = x;
      return;
    }
    if (req.path == "/flood") {
      // Writes 64 MiB in 4 KiB chunks from another thread, as fast as it can.
      x->OnClose([this] { closed_.Notify(); });
      x->StartStream(HttpResponse{}, "data: {\"error\": \"cut\"}\n\n");
      threads_.emplace_back([this, x] {
        const std::string chunk(4096, 'x');
        int written = 0;
        while (written < 16384 && x->Write(chunk)) ++written;
        flood_chunks_ = written;
        x->EndStream();
      });
      return;
    }
    if (req.path == "/stream") {
      x->StartStream(HttpResponse{}, "cut");
      x->Write("one ");
      x->Write("two");
      x->EndStream();
      return;
    }
    HttpResponse r;
    r.status = 404;
    x->Respond(std::move(r));
  }

  std::unique_ptr<HttpServer> server_;
  absl::Notification closed_;
  std::shared_ptr<HttpExchange> hung_;
  std::vector<std::thread> threads_;
  std::atomic<int> flood_chunks_{-1};
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Start();
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  const std::string body = "{\"a\": 1}";
  SendAll(fd, absl::StrCat("POST /echo HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\nContent-Length: ",
                           body.size(), "\r\n\r\n", body));
  SendAll(fd, Get("/stream"));
  // Not pipelined by the server: the second request waits until the first is answered.
  SendAll(fd, Get("/echo", /*close_after=*/true));
  bool timed_out = false;
  const std::string out = ReadUntilClosed(fd, absl::Seconds(10), &timed_out);
  close(fd);
  EXPECT_FALSE(timed_out);
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(out, HasSubstr("POST 8 yes"));
  EXPECT_THAT(out, HasSubstr("Transfer-Encoding: chunked"));
  EXPECT_THAT(out, HasSubstr("4\r\none \r\n3\r\ntwo\r\n0\r\n\r\n"));
  EXPECT_THAT(out, HasSubstr("GET 0 -"));
}

TEST_F(HttpServerTest, LimitsGetTheirStatusFromTheErrorResponse) {
  HttpServerOptions o;
  o.max_body_bytes = 100;
  o.max_header_bytes = 1024;
  o.error_response = [](int status, std::string message) {
    HttpResponse r;
    r.status = status;
    r.body = absl::StrCat("{\"error\": \"", message, "\"}");
    return r;
  };
  Start(o);
  struct Case {
    std::string request;
    std::string status;
  };
  const std::vector<Case> cases = {
      {absl::StrCat("POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n", std::string(101, 'x')),
       "HTTP/1.1 413"},
      {absl::StrCat("GET /echo HTTP/1.1\r\nX-Big: ", std::string(2000, 'y'), "\r\n\r\n"),
       "HTTP/1.1 431"},
      {"NOT HTTP AT ALL\r\n\r\n", "HTTP/1.1 400"},
      {"GET /echo HTTP/1.1\r\nContent-Length: zz\r\n\r\n", "HTTP/1.1 400"},
  };
  for (const Case& c : cases) {
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    SendAll(fd, c.request);
    bool timed_out = false;
    const std::string out = ReadUntilClosed(fd, absl::Seconds(10), &timed_out);
    close(fd);
    EXPECT_FALSE(timed_out) << c.request.substr(0, 30);
    EXPECT_THAT(out, StartsWith(c.status)) << c.request.substr(0, 30);
    EXPECT_THAT(out, HasSubstr("{\"error\": ")) << out;
  }
  // A body within the limit, announced with Expect: 100-continue as curl does.
  const int fd = Connect(server_->port());
  SendAll(fd, "POST /echo HTTP/1.1\r\nConnection: close\r\nExpect: 100-continue\r\n"
              "Content-Length: 5\r\n\r\n");
  char buf[256];
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), StartsWith("HTTP/1.1 100 Continue"));
  SendAll(fd, "hello");
  bool timed_out = false;
  EXPECT_THAT(ReadUntilClosed(fd, absl::Seconds(10), &timed_out), HasSubstr("POST 5 -"));
  close(fd);
}

TEST_F(HttpServerTest, SlowHeadersAndIdleConnectionsAreCut) {
  HttpServerOptions o;
  o.request_timeout = absl::Milliseconds(300);
  o.idle_timeout = absl::Milliseconds(500);
  Start(o);
  // A head that never ends.
  const int slow = Connect(server_->port());
  SendAll(slow, "GET /echo HTTP/1.1\r\nHost: x\r\n");
  // A connection that never sends anything.
  const int silent = Connect(server_->port());
  // A keep-alive connection that goes quiet after one request.
  const int idle = Connect(server_->port());
  SendAll(idle, Get("/echo"));
  for (int fd : {slow, silent, idle}) {
    bool timed_out = false;
    const std::string out = ReadUntilClosed(fd, absl::Seconds(20), &timed_out);
    EXPECT_FALSE(timed_out) << "the server kept connection " << fd << " open";
    if (fd == idle) {
      EXPECT_THAT(out, HasSubstr("GET 0 -"));
    }
    if (fd != idle) {
      EXPECT_EQ(out, "");
    }
    close(fd);
  }
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (server_->num_connections() > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(server_->num_connections(), 0);
}

TEST_F(HttpServerTest, AClientLeavingRunsTheCloseCallback) {
  Start();
  const int fd = Connect(server_->port());
  SendAll(fd, Get("/hang"));
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (server_->num_connections() == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(closed_.HasBeenNotified());
  close(fd);
  EXPECT_TRUE(closed_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_NE(hung_, nullptr);
  EXPECT_TRUE(hung_->closed());
  EXPECT_FALSE(hung_->Write("late"));
  hung_->Respond(HttpResponse{});  // ignored: nothing to answer
  hung_.reset();
}

TEST_F(HttpServerTest, ASlowReaderIsCutWithTheCutEvent) {
  HttpServerOptions o;
  o.max_stream_buffer_bytes = 64 << 10;
  Start(o);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  SendAll(fd, Get("/flood"));
  // Read nothing until the server has given up on us.
  EXPECT_TRUE(closed_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  bool timed_out = false;
  const std::string out = ReadUntilClosed(fd, absl::Seconds(30), &timed_out);
  close(fd);
  EXPECT_FALSE(timed_out);
  for (int i = 0; i < 1000 && flood_chunks_.load() < 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  // It wrote far less than the 64 MiB it meant to, and what came ends with the cut event.
  EXPECT_GE(flood_chunks_.load(), 0);
  EXPECT_LT(flood_chunks_.load(), 16384);
  EXPECT_LT(out.size(), 32u << 20);
  EXPECT_THAT(out, HasSubstr("data: {\"error\": \"cut\"}\n\n\r\n0\r\n\r\n"));
}

// A burst of connections at once, each sending its request: every one is answered and
// none is reset (the listen backlog holds the burst).
TEST_F(HttpServerTest, ABurstOf500ConnectionsIsServedWithoutResets) {
  Start();
  constexpr int kConnections = 500;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds.push_back(fd);
  }
  int answered = 0;
  int resets = 0;
  std::vector<bool> sent(kConnections, false);
  std::vector<std::string> got(kConnections);
  std::vector<bool> done(kConnections, false);
  const std::string request = Get("/echo", /*close_after=*/true);
  const absl::Time end = absl::Now() + absl::Seconds(30);
  int open = kConnections;
  while (open > 0 && absl::Now() < end) {
    std::vector<pollfd> polls;
    for (int i = 0; i < kConnections; ++i) {
      if (!done[i]) polls.push_back({fds[i], static_cast<short>(sent[i] ? POLLIN : POLLOUT), 0});
    }
    if (poll(polls.data(), polls.size(), 100) <= 0) continue;
    for (const pollfd& p : polls) {
      if (p.revents == 0) continue;
      const int i = static_cast<int>(std::find(fds.begin(), fds.end(), p.fd) - fds.begin());
      if (!sent[i]) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || send(p.fd, request.data(), request.size(), MSG_NOSIGNAL) <= 0) {
          ++resets;
          done[i] = true;
          --open;
          continue;
        }
        sent[i] = true;
        continue;
      }
      char buf[4096];
      const ssize_t n = recv(p.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        got[i].append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EAGAIN) continue;
      if (n < 0) ++resets;
      if (absl::StrContains(got[i], "GET 0 -")) ++answered;
      done[i] = true;
      --open;
    }
  }
  for (int fd : fds) close(fd);
  EXPECT_EQ(resets, 0);
  EXPECT_EQ(answered, kConnections);
}

// Certificates made here with openssl: a CA, a server certificate for 127.0.0.1 and a
// client certificate, both signed by the CA.
class HttpsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "openssl is needed to make the test certificates (apt-get install openssl)";
    }
    // One folder per test process: ctest runs the tests of this file side by side.
    dir_ = absl::StrCat(::testing::TempDir(), "/https_test_certs_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::string script = absl::StrCat(
        "set -e; rm -rf ", dir_, "; mkdir -p ", dir_, "; cd ", dir_, "; ",
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 "
        "-subj /CN=folio-test-ca 2>/dev/null; ",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext; ",
        "for n in server client; do ",
        "openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null; ",
        "openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt "
        "-days 2 -extfile san.ext 2>/dev/null; done");
    ASSERT_EQ(std::system(script.c_str()), 0) << script;
  }
  std::string dir_;
};

TEST_F(HttpsTest, ServesHttpsAndRefusesClientsWithoutTheCa) {
  HttpServerOptions o;
  o.tls = TlsFiles{dir_ + "/server.crt", dir_ + "/server.key", ""};
  Start(o);
  {
    httplib::SSLClient client("127.0.0.1", server_->port());
    client.set_ca_cert_path((dir_ + "/ca.crt").c_str());
    client.enable_server_certificate_verification(true);
    httplib::Result r = client.Get("/echo");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->body, "GET 0 -");
  }
  {
    // A client that does not trust the CA refuses the server.
    httplib::SSLClient client("127.0.0.1", server_->port());
    client.enable_server_certificate_verification(true);
    client.set_ca_cert_path((dir_ + "/client.crt").c_str());  // not the CA
    EXPECT_FALSE(client.Get("/echo"));
  }
  {
    // Plain HTTP on the HTTPS port gets nothing served.
    const int fd = Connect(server_->port());
    SendAll(fd, Get("/echo"));
    bool timed_out = false;
    EXPECT_THAT(ReadUntilClosed(fd, absl::Seconds(20), &timed_out), ::testing::Not(HasSubstr("GET 0")));
    close(fd);
  }
}

TEST_F(HttpsTest, WithACaClientsMustPresentACertificate) {
  HttpServerOptions o;
  o.tls = TlsFiles{dir_ + "/server.crt", dir_ + "/server.key", dir_ + "/ca.crt"};
  Start(o);
  {
    httplib::SSLClient client("127.0.0.1", server_->port(), dir_ + "/client.crt",
                              dir_ + "/client.key");
    client.set_ca_cert_path((dir_ + "/ca.crt").c_str());
    client.enable_server_certificate_verification(true);
    httplib::Result r = client.Get("/echo");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->body, "GET 0 -");
  }
  {
    httplib::SSLClient client("127.0.0.1", server_->port());  // no client certificate
    client.set_ca_cert_path((dir_ + "/ca.crt").c_str());
    client.enable_server_certificate_verification(true);
    EXPECT_FALSE(client.Get("/echo"));
  }
}

TEST(HttpServerStartTest, BadTlsFilesAreInvalidArgument) {
  HttpServerOptions o;
  o.port = 0;
  o.tls = TlsFiles{"/nonexistent/cert.pem", "/nonexistent/key.pem", ""};
  auto server = HttpServer::Start(o, [](HttpRequest, std::shared_ptr<HttpExchange>) {});
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace folio::frontend
