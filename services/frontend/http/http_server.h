// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast on Asio), optionally over TLS
// (OpenSSL through asio::ssl). No thread per connection: a few I/O threads serve every
// connection, each on its own strand. The OpenAI API (openai_server.h) sits on top; this
// file and http_server.cc are the only ones that see Beast or Asio.
//
// Per connection, in order:
//   - TLS handshake (when configured), bounded by request_timeout;
//   - wait for a request's first byte: request_timeout on a new connection, idle_timeout
//     between keep-alive requests; then the whole head and body within request_timeout
//     (a slow-header client is cut there). Bodies over max_body_bytes get 413, heads over
//     max_header_bytes 431, malformed requests 400, each with error_body's answer, and the
//     connection is closed. "Expect: 100-continue" is answered.
//   - the handler gets the request and an HttpExchange to answer on, at once or later,
//     from any thread: one whole response, or a stream of chunks (chunked encoding). While
//     the answer is pending the connection is watched: the client closing it fires the
//     exchange's close callback (the handler cancels its work).
//   - a stream buffers at most max_stream_buffer_bytes that the client has not taken; past
//     that it is cut: the stream's cut event is sent, the connection closed, and the close
//     callback fired. A write that makes no progress for write_timeout closes it too.
//   - keep-alive as the request asks (HTTP/1.1 default); no pipelining (bytes a client
//     sends early wait in the buffer until the answer is out).
//
// Thread-safe. Stop() is idempotent; the destructor calls it. Every HttpExchange must be
// released before the server is destroyed (the OpenAI server waits for its calls to end).
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_HTTP_SERVER_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace folio::frontend {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  // The first header named `name` (lower case), if any.
  std::optional<std::string_view> header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;  // a stream's head: ignored
  std::vector<std::pair<std::string, std::string>> headers;
};

// One request's answer. Thread-safe; every call may come from any thread.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // The whole response. Ignored after the first Respond/StartStream or once closed.
  virtual void Respond(HttpResponse response) = 0;
  // Starts a chunked stream with `head`'s status and headers. `cut_event` is sent as the
  // last chunk if the client falls max_stream_buffer_bytes behind.
  virtual void StartStream(HttpResponse head, std::string cut_event) = 0;
  // Queues one chunk. False when the client is gone or the stream was cut: stop writing.
  virtual bool Write(std::string data) = 0;
  // Ends the stream (the last chunk); the connection goes on with keep-alive.
  virtual void EndStream() = 0;
  // Runs `on_close` once, on an I/O thread, if the connection ends before the answer is
  // complete (client gone, stream cut, timeout, server stop); never after a completed
  // answer. Call at most once; calling it after the close runs `on_close` at once.
  virtual void OnClose(std::function<void()> on_close) = 0;
  // True once the connection is closed or the stream cut.
  virtual bool closed() const = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain
  std::string key_file;   // PEM private key
  std::string ca_file;    // when set, clients must present a certificate this CA signed
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0 picks a free port
  int listen_backlog = 4096;          // pending connections the kernel queues (somaxconn caps it)
  int num_threads = 2;                // I/O threads
  size_t max_body_bytes = 1 << 20;    // larger bodies: 413
  size_t max_header_bytes = 16 << 10; // larger heads: 431
  absl::Duration request_timeout = absl::Seconds(10);  // first byte to end of body; handshake
  absl::Duration idle_timeout = absl::Seconds(60);     // keep-alive wait for the next request
  absl::Duration write_timeout = absl::Seconds(30);    // a write that makes no progress
  size_t max_stream_buffer_bytes = 1 << 20;            // a stream's unsent bytes before a cut
  int socket_send_buffer_bytes = 0;   // SO_SNDBUF of each connection; 0: the kernel's autotuning
  std::optional<TlsFiles> tls;        // HTTPS when set
  // The answer to errors the server finds itself (400, 413, 431), given status and message.
  std::function<HttpResponse(int status, std::string message)> error_response;
};

class HttpServer {
 public:
  // Binds host:port (Unavailable when it cannot; InvalidArgument for unusable TLS files)
  // and starts serving with `handler`, which runs on an I/O thread and must not block.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HttpHandler handler);
  ~HttpServer();

  int port() const;
  // Connections open now (for tests and metrics).
  int num_connections() const;

  // Stops accepting, gives answers in progress up to `grace` to reach their clients,
  // then closes every connection and joins the I/O threads.
  void Stop(absl::Duration grace = absl::Seconds(1));

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_HTTP_SERVER_H_
