#include "services/frontend/http/http_server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace folio::frontend {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using SslStream = ssl::stream<tcp::socket>;

namespace {

// Bytes read ahead while an answer is pending: enough to notice the client closing.
constexpr size_t kWatchReadBytes = 4096;

std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

std::string_view View(beast::string_view s) { return std::string_view(s.data(), s.size()); }

tcp::socket& Lowest(tcp::socket& s) { return s; }
tcp::socket& Lowest(SslStream& s) { return s.next_layer(); }

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == beast::error_code(http::error::bad_method).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

// A connection as the server sees it, to close it at Stop().
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Posts a close to the session's strand. Returns a reference to the session (null when
  // it is being destroyed) that the caller drops only outside the server's lock: the
  // session may be destroyed with it, and its destructor takes that lock.
  virtual std::shared_ptr<void> CloseFromServer() = 0;
};

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  std::optional<ssl::context> tls;
  std::atomic<int> connections{0};
  std::atomic<int> busy{0};  // connections with an answer pending or still being written
  std::atomic<bool> stopping{false};
  absl::Mutex mu;
  absl::flat_hash_set<SessionBase*> sessions ABSL_GUARDED_BY(mu);
  int port = 0;
  // Destroyed before the members above: the handlers it still holds own sessions.
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  std::vector<std::thread> threads;

  void Accept();
  HttpResponse ErrorResponse(int status, std::string message) const {
    if (options.error_response) return options.error_response(status, std::move(message));
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = std::move(message);
    return r;
  }
};

namespace {

template <class Stream>
class Session;

template <class Stream>
class Exchange final : public HttpExchange, public std::enable_shared_from_this<Exchange<Stream>> {
 public:
  Exchange(std::shared_ptr<Session<Stream>> session, size_t max_queued_bytes)
      : session_(std::move(session)), max_queued_bytes_(max_queued_bytes) {}

  void Respond(HttpResponse response) override {
    Post([response = std::move(response)](Session<Stream>* s, Exchange* x) mutable {
      s->DoRespond(x, std::move(response));
    });
  }
  void StartStream(HttpResponse head, std::string cut_event) override {
    Post([head = std::move(head), cut = std::move(cut_event)](Session<Stream>* s,
                                                             Exchange* x) mutable {
      s->DoStartStream(x, std::move(head), std::move(cut));
    });
  }
  bool Write(std::string data) override {
    if (closed_.load()) return false;
    // Bytes posted to the strand but not yet taken count against the stream's bound too,
    // so a producer faster than the I/O thread cannot grow the queue without bound.
    const size_t n = data.size();
    if (queued_bytes_.fetch_add(n) + n > max_queued_bytes_) {
      Post([](Session<Stream>* s, Exchange* x) { s->DoCut(x); });
      return false;
    }
    Post([data = std::move(data)](Session<Stream>* s, Exchange* x) mutable {
      x->queued_bytes_.fetch_sub(data.size());
      s->DoWrite(x, std::move(data));
    });
    return true;
  }
  void EndStream() override {
    Post([](Session<Stream>* s, Exchange* x) { s->DoEnd(x); });
  }
  void OnClose(std::function<void()> on_close) override {
    Post([f = std::move(on_close)](Session<Stream>* s, Exchange* x) mutable {
      s->DoOnClose(x, std::move(f));
    });
  }
  bool closed() const override { return closed_.load(); }

  // Strand-only state (the session's).
  std::function<void()> on_close;
  bool started = false;   // Respond or StartStream seen
  bool complete = false;  // the answer's end is queued
  std::atomic<bool> closed_{false};
  std::atomic<size_t> queued_bytes_{0};  // posted by Write, not yet taken by the strand

 private:
  template <class F>
  void Post(F f) {
    net::post(session_->executor(),
              [self = this->shared_from_this(), f = std::move(f)]() mutable {
                f(self->session_.get(), self.get());
              });
  }
  const std::shared_ptr<Session<Stream>> session_;
  const size_t max_queued_bytes_;
};

// One connection. Everything runs on its strand.
template <class Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl* server, Stream stream)
      : server_(server),
        stream_(std::move(stream)),
        read_timer_(stream_.get_executor()),
        write_timer_(stream_.get_executor()) {
    absl::MutexLock lock(&server_->mu);
    server_->sessions.insert(this);
  }
  ~Session() override {
    {
      absl::MutexLock lock(&server_->mu);
      server_->sessions.erase(this);
    }
    if (busy_) server_->busy.fetch_sub(1);
    server_->connections.fetch_sub(1);
  }

  auto executor() { return stream_.get_executor(); }

  void Start() {
    if constexpr (std::is_same_v<Stream, SslStream>) {
      ArmRead(server_->options.request_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (self->state_ == State::kClosed) return;
                                if (ec) return self->Close();
                                self->WaitForRequest();
                              });
    } else {
      WaitForRequest();
    }
  }

  std::shared_ptr<void> CloseFromServer() override {
    std::shared_ptr<Session> self = this->weak_from_this().lock();
    if (self == nullptr) return nullptr;  // being destroyed
    net::post(executor(), [self] { self->Close(); });
    return self;
  }

  void DoRespond(Exchange<Stream>* x, HttpResponse r) {
    if (!Current(x) || x->started) return;
    x->started = true;
    x->complete = true;
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.keep_alive(keep_alive_ && !server_->stopping.load());
    res.body() = std::move(r.body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    answer_queued_ = true;
    Queue(os.str());
  }

  void DoStartStream(Exchange<Stream>* x, HttpResponse head, std::string cut_event) {
    if (!Current(x) || x->started) return;
    x->started = true;
    cut_event_ = std::move(cut_event);
    http::response<http::empty_body> res{static_cast<http::status>(head.status), 11};
    res.set(http::field::content_type, head.content_type);
    for (const auto& [k, v] : head.headers) res.set(k, v);
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the body is the close
    res.keep_alive(keep_alive_);
    if (chunked_) res.chunked(true);
    std::ostringstream os;
    os << res.base();
    Queue(os.str());
  }

  void DoWrite(Exchange<Stream>* x, std::string data) {
    if (!Current(x) || !x->started || x->complete || data.empty()) return;
    std::string framed =
        chunked_ ? absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n") : std::move(data);
    if (out_pending_.size() + framed.size() > server_->options.max_stream_buffer_bytes) {
      return Cut(x);
    }
    Queue(std::move(framed));
  }

  void DoCut(Exchange<Stream>* x) {
    if (!Current(x) || !x->started || x->complete) return;
    Cut(x);
  }

  void DoEnd(Exchange<Stream>* x) {
    if (!Current(x) || !x->started || x->complete) return;
    x->complete = true;
    answer_queued_ = true;
    Queue(chunked_ ? "0\r\n\r\n" : "");
  }

  void DoOnClose(Exchange<Stream>* x, std::function<void()> f) {
    if (x->closed_.load() && !x->complete) return f();  // closed before its answer was out
    if (!Current(x)) return;  // finished: never runs
    x->on_close = std::move(f);
  }

 private:
  enum class State { kWaiting, kReading, kHandling, kClosed };

  bool Current(Exchange<Stream>* x) const {
    return state_ != State::kClosed && current_ != nullptr && current_.get() == x;
  }

  void ArmRead(absl::Duration d) {
    const uint64_t gen = ++read_gen_;
    read_timer_.expires_after(ToChrono(d));
    read_timer_.async_wait([self = this->shared_from_this(), gen](beast::error_code ec) {
      if (!ec && gen == self->read_gen_) self->Close();
    });
  }
  void DisarmRead() {
    ++read_gen_;
    read_timer_.cancel();
  }

  // Between requests: the next request's first byte, within the idle (or first) timeout.
  void WaitForRequest() {
    state_ = State::kWaiting;
    if (buffer_.size() > 0) return ReadRequest();
    ArmRead(first_request_ ? server_->options.request_timeout : server_->options.idle_timeout);
    if (!raw_reading_) StartRawRead();
  }

  void StartRawRead() {
    raw_reading_ = true;
    stream_.async_read_some(
        buffer_.prepare(kWatchReadBytes),
        [self = this->shared_from_this()](beast::error_code ec, size_t n) {
          self->OnRawRead(ec, n);
        });
  }

  void OnRawRead(beast::error_code ec, size_t n) {
    raw_reading_ = false;
    if (state_ == State::kClosed) return;
    if (ec) return Close();  // the client went away (or a timeout closed the socket)
    buffer_.commit(n);
    // While an answer is pending, bytes the client sends early wait in the buffer; the
    // connection is no longer watched (no pipelining: nothing more is read until then).
    if (state_ == State::kWaiting) ReadRequest();
  }

  void ReadRequest() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    ArmRead(server_->options.request_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              self->OnHead(ec);
                            });
  }

  // Answers a request the server cannot take, then closes the connection.
  bool RejectIfBad(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      Reject(413, absl::StrCat("the request body is larger than ",
                               server_->options.max_body_bytes, " bytes"));
    } else if (ec == http::error::header_limit) {
      Reject(431, absl::StrCat("the request head is larger than ",
                               server_->options.max_header_bytes, " bytes"));
    } else if (IsParseError(ec)) {
      Reject(400, absl::StrCat("malformed HTTP request: ", ec.message()));
    } else {
      return false;
    }
    return true;
  }

  void OnHead(beast::error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec) {
      if (!RejectIfBad(ec)) Close();
      return;
    }
    auto& req = parser_->get();
    if (absl::EqualsIgnoreCase(absl::string_view(req[http::field::expect].data(), req[http::field::expect].size()), "100-continue")) {
      Queue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (parser_->is_done()) return OnBody({});
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->OnBody(ec);
                     });
  }

  void OnBody(beast::error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec) {
      if (!RejectIfBad(ec)) Close();
      return;
    }
    DisarmRead();
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive();
    chunked_ = req.version() >= 11;
    HttpRequest request;
    request.method = std::string(View(req.method_string()));
    const std::string_view target = View(req.target());
    request.path = std::string(target.substr(0, target.find('?')));
    for (const auto& field : req) {
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(View(field.name_string()))),
                                   std::string(View(field.value())));
    }
    request.body = std::move(req.body());

    state_ = State::kHandling;
    current_ = std::make_shared<Exchange<Stream>>(this->shared_from_this(),
                                                   server_->options.max_stream_buffer_bytes);
    SetBusy(true);
    if (buffer_.size() == 0) StartRawRead();  // notices the client leaving
    std::shared_ptr<HttpExchange> exchange = current_;
    try {
      server_->handler(std::move(request), exchange);
    } catch (const std::exception& e) {
      LOG(ERROR) << "HTTP handler threw: " << e.what();
      exchange->Respond(server_->ErrorResponse(500, "internal error"));
    }
  }

  void Reject(int status, std::string message) {
    DisarmRead();
    parser_.reset();
    keep_alive_ = false;
    state_ = State::kHandling;
    current_ = std::make_shared<Exchange<Stream>>(this->shared_from_this(),
                                                   server_->options.max_stream_buffer_bytes);
    SetBusy(true);
    HttpResponse r = server_->ErrorResponse(status, std::move(message));
    r.headers.emplace_back("Connection", "close");
    DoRespond(current_.get(), std::move(r));
  }

  // The client is max_stream_buffer_bytes behind: the cut event, then the close.
  void Cut(Exchange<Stream>* x) {
    x->complete = true;
    x->closed_.store(true);
    keep_alive_ = false;
    answer_queued_ = true;
    std::string tail = chunked_ ? absl::StrCat(absl::Hex(cut_event_.size()), "\r\n", cut_event_,
                                               "\r\n0\r\n\r\n")
                                : cut_event_;
    if (auto f = std::move(x->on_close)) f();
    Queue(std::move(tail));
  }

  void Queue(std::string bytes) {
    out_pending_ += bytes;
    Flush();
  }

  void Flush() {
    if (writing_ || state_ == State::kClosed) return;
    if (out_pending_.empty()) {
      if (answer_queued_) AnswerDone();
      return;
    }
    std::swap(out_inflight_, out_pending_);
    out_pending_.clear();
    writing_ = true;
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(ToChrono(server_->options.write_timeout));
    write_timer_.async_wait([self = this->shared_from_this(), gen](beast::error_code ec) {
      if (!ec && gen == self->write_gen_) self->Close();  // the reader makes no progress
    });
    net::async_write(stream_, net::buffer(out_inflight_),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->OnWritten(ec);
                     });
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    ++write_gen_;
    write_timer_.cancel();
    if (out_inflight_.capacity() > (64 << 10)) {
      std::string().swap(out_inflight_);
    } else {
      out_inflight_.clear();
    }
    if (state_ == State::kClosed) return;
    if (ec) return Close();
    Flush();
  }

  // The answer's last byte is out.
  void AnswerDone() {
    answer_queued_ = false;
    if (current_ != nullptr) current_->on_close = nullptr;
    current_.reset();
    SetBusy(false);
    if (!keep_alive_ || server_->stopping.load()) {
      beast::error_code ignored;
      Lowest(stream_).shutdown(tcp::socket::shutdown_send, ignored);
      return Close();
    }
    first_request_ = false;
    WaitForRequest();
  }

  // Ends the connection; an answer still pending sees its close callback run.
  void Close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    beast::error_code ignored;
    Lowest(stream_).close(ignored);
    DisarmRead();
    ++write_gen_;
    write_timer_.cancel();
    parser_.reset();
    SetBusy(false);
    if (std::shared_ptr<Exchange<Stream>> x = std::move(current_)) {
      x->closed_.store(true);
      if (!x->complete) {
        if (auto f = std::move(x->on_close)) f();
      }
      x->on_close = nullptr;
      x->complete = true;
    }
  }

  void SetBusy(bool busy) {
    if (busy == busy_) return;
    busy_ = busy;
    if (busy) {
      server_->busy.fetch_add(1);
    } else {
      server_->busy.fetch_sub(1);
    }
  }

  HttpServer::Impl* const server_;  // outlives every session
  Stream stream_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  uint64_t read_gen_ = 0;   // a timer firing for an older arming does nothing
  uint64_t write_gen_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kWaiting;
  bool raw_reading_ = false;   // an async_read_some is in flight (implies buffer_ was empty)
  bool first_request_ = true;
  bool keep_alive_ = true;
  bool chunked_ = true;        // HTTP/1.1: streams are chunked
  bool busy_ = false;
  bool writing_ = false;
  bool answer_queued_ = false;  // the answer's end is in out_pending_ / out_inflight_
  std::shared_ptr<Exchange<Stream>> current_;  // the pending answer's exchange
  std::string cut_event_;
  std::string out_pending_;   // queued, not yet handed to the socket
  std::string out_inflight_;  // being written
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || stopping.load()) return;
    if (ec) {
      // Out of file descriptors and the like: retry shortly rather than spin.
      LOG_EVERY_N(WARNING, 100) << "HTTP accept failed: " << ec.message();
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code ec) {
        if (!ec) Accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (options.socket_send_buffer_bytes > 0) {
      socket.set_option(net::socket_base::send_buffer_size(options.socket_send_buffer_bytes),
                        ignored);
    }
    connections.fetch_add(1);
    if (tls.has_value()) {
      std::make_shared<Session<SslStream>>(this, SslStream(std::move(socket), *tls))->Start();
    } else {
      std::make_shared<Session<tcp::socket>>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }

int HttpServer::num_connections() const { return impl_->connections.load(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                             HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  const HttpServerOptions& o = impl->options;
  if (o.tls.has_value()) {
    impl->tls.emplace(ssl::context::tls_server);
    ssl::context& ctx = *impl->tls;
    beast::error_code ec;
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    ctx.use_certificate_chain_file(o.tls->cert_file, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("cannot use the TLS certificate ",
                                                     o.tls->cert_file, ": ", ec.message()));
    }
    ctx.use_private_key_file(o.tls->key_file, ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot use the TLS key ", o.tls->key_file, ": ", ec.message()));
    }
    if (!o.tls->ca_file.empty()) {
      ctx.load_verify_file(o.tls->ca_file, ec);
      if (ec) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot use the TLS CA ", o.tls->ca_file, ": ", ec.message()));
      }
      ctx.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
  }
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(o.host == "localhost" ? "127.0.0.1" : o.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad HTTP host '", o.host, "'"));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(o.port));
  tcp::acceptor& acceptor = impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(o.listen_backlog, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the HTTP API to ", o.host, ":", o.port, ": ", ec.message()));
  }
  impl->port = acceptor.local_endpoint().port();
  impl->Accept();
  Impl* raw = impl.get();
  for (int i = 0; i < std::max(1, o.num_threads); ++i) {
    impl->threads.emplace_back([raw] {
      auto guard = net::make_work_guard(raw->ioc);
      raw->ioc.run();
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Stop(absl::Duration grace) {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  net::post(s.ioc, [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
  });
  const absl::Time give_up = absl::Now() + grace;
  while (s.busy.load() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  std::vector<std::shared_ptr<void>> closing;
  {
    absl::MutexLock lock(&s.mu);
    for (SessionBase* session : s.sessions) closing.push_back(session->CloseFromServer());
  }
  closing.clear();  // outside the lock: the last reference may destroy a session here

  const absl::Time closed_by = absl::Now() + absl::Seconds(2);
  while (s.connections.load() > 0 && absl::Now() < closed_by) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  s.ioc.stop();
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
}

}  // namespace folio::frontend
