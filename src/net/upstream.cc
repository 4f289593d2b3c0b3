#include "net/upstream.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"

namespace gpusched::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct UpstreamClient::Impl {
  explicit Impl(const UpstreamOptions& o)
      : options(o),
        own(std::make_unique<asio::io_context>()),
        ioc(o.io_context != nullptr ? *o.io_context : *own),
        work(asio::make_work_guard(*own)) {}
  UpstreamOptions options;
  // Unused when options.io_context is set. Destroyed by ~UpstreamClient
  // after its threads end: that destroys the handlers of calls still in
  // flight, which hold the Impl (found by LeakSanitizer in controller_test:
  // a probe in flight at shutdown kept the whole client alive).
  std::unique_ptr<asio::io_context> own;
  asio::io_context& ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> threads;
  mutable absl::Mutex mu;
  // Idle keep-alive connections per endpoint, with when each was pooled.
  struct Pooled {
    std::unique_ptr<beast::tcp_stream> stream;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::pair<std::string, uint16_t>, std::vector<Pooled>> idle
      ABSL_GUARDED_BY(mu);
  std::chrono::steady_clock::time_point last_sweep ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;  // ~UpstreamClient has begun

  // Whether a pooled connection can still carry a request: nothing to read
  // (a peer that closed reads as end of file; bytes on an idle connection
  // mean it is out of step).
  static bool Usable(beast::tcp_stream& s) {
    char c;
    const ssize_t n =
        ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  // Closes pooled connections that are too old or whose peer closed, and
  // forgets endpoints with none left (found by bench/soak.sh: every killed
  // engine left its pooled connections open in CLOSE_WAIT, 40 descriptors
  // a minute).
  void Sweep(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (now - last_sweep < options.idle_sweep_period) return;
    last_sweep = now;
    for (auto it = idle.begin(); it != idle.end();) {
      std::erase_if(it->second, [&](Pooled& p) {
        return now - p.since > options.max_idle_age || !Usable(*p.stream);
      });
      it = it->second.empty() ? idle.erase(it) : std::next(it);
    }
  }

  std::unique_ptr<beast::tcp_stream> TakeIdle(const Endpoint& ep) {
    absl::MutexLock lock(&mu);
    Sweep(std::chrono::steady_clock::now());
    // A connection the peer closed since the last sweep fails at once and
    // is retried fresh (Call::RetryOrFail): no check per request here.
    auto it = idle.find({ep.host, ep.port});
    if (it == idle.end() || it->second.empty()) return nullptr;
    auto s = std::move(it->second.back().stream);
    it->second.pop_back();
    return s;
  }
  void GiveBack(const Endpoint& ep, std::unique_ptr<beast::tcp_stream> s) {
    absl::MutexLock lock(&mu);
    // The client is going away: the connection closes here, on the thread
    // of the call, while its io_context lives (pooled, it would be closed
    // after the io_context ends: found by ASan in controller_test).
    if (closed) return;
    const auto now = std::chrono::steady_clock::now();
    Sweep(now);
    auto& v = idle[{ep.host, ep.port}];
    if (static_cast<int>(v.size()) < options.max_idle_per_endpoint) {
      v.push_back({std::move(s), now});
    }
  }
};

namespace {

class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(std::shared_ptr<UpstreamClient::Impl> impl, Endpoint ep,
       http::request<http::string_body> req, UpstreamCallbacks cb)
      : impl_(std::move(impl)),
        ep_(std::move(ep)),
        req_(std::move(req)),
        cb_(std::move(cb)) {}

  void Start() {
    stream_ = impl_->TakeIdle(ep_);
    reused_ = stream_ != nullptr;
    if (reused_) {
      Write();
      return;
    }
    Connect();
  }

 private:
  void Connect() {
    beast::error_code ec;
    const auto address = asio::ip::make_address(ep_.host, ec);
    if (ec) {
      Done(absl::InvalidArgumentError(
          absl::StrCat("upstream address '", ep_.host, "': ", ec.message())));
      return;
    }
    stream_ =
        std::make_unique<beast::tcp_stream>(asio::make_strand(impl_->ioc));
    stream_->expires_after(impl_->options.connect_timeout);
    stream_->async_connect(tcp::endpoint(address, ep_.port),
                           [self = shared_from_this()](beast::error_code ec) {
                             if (ec) {
                               self->Done(self->Failure("connect", ec));
                               return;
                             }
                             // Requests go out in one write; this keeps
                             // any later small write from waiting on ACKs.
                             beast::error_code ignored;
                             self->stream_->socket().set_option(
                                 tcp::no_delay(true), ignored);
                             self->Write();
                           });
  }

  void Write() {
    req_.set(http::field::host, absl::StrCat(ep_.host, ":", ep_.port));
    req_.keep_alive(true);
    req_.prepare_payload();
    stream_->expires_after(impl_->options.first_byte_timeout);
    http::async_write(
        *stream_, req_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) {
            self->RetryOrFail("send", ec);
            return;
          }
          self->ReadHead();
        });
  }

  void ReadHead() {
    parser_.emplace();
    // No limit (boost::none trips a comparison bug in Beast 1.74's parser).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    // Body bytes that come with the head land here too.
    parser_->get().body().data = piece_;
    parser_->get().body().size = sizeof(piece_);
    http::async_read_header(
        *stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) {
            self->RetryOrFail("read the response head", ec);
            return;
          }
          self->got_head_ = true;
          if (self->cb_.on_head) self->cb_.on_head(self->parser_->get().base());
          self->Deliver();
          self->ReadBody();
        });
  }

  void ReadBody() {
    if (parser_->is_done()) {
      Finish();
      return;
    }
    parser_->get().body().data = piece_;
    parser_->get().body().size = sizeof(piece_);
    stream_->expires_after(impl_->options.idle_timeout);
    http::async_read_some(
        *stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec == http::error::need_buffer) ec = {};
          self->Deliver();
          if (ec) {
            self->Done(self->Failure("read the response body", ec));
            return;
          }
          self->ReadBody();
        });
  }

  // Hands over what the parser wrote into piece_ since the last reset.
  void Deliver() {
    const size_t n = sizeof(piece_) - parser_->get().body().size;
    if (n > 0 && cb_.on_data) cb_.on_data(std::string(piece_, n));
    parser_->get().body().data = piece_;
    parser_->get().body().size = sizeof(piece_);
  }

  void Finish() {
    const bool keep = parser_->get().keep_alive();
    if (keep) {
      stream_->expires_never();
      impl_->GiveBack(ep_, std::move(stream_));
    }
    Done(absl::OkStatus());
  }

  // A pooled connection the engine had closed fails at once: retry once on
  // a fresh connection (nothing of the request was processed).
  void RetryOrFail(const char* what, beast::error_code ec) {
    if (reused_ && !got_head_) {
      reused_ = false;
      stream_.reset();
      Connect();
      return;
    }
    Done(Failure(what, ec));
  }

  absl::Status Failure(const char* what, beast::error_code ec) const {
    const std::string msg = absl::StrCat("upstream ", ep_.host, ":", ep_.port,
                                         ": cannot ", what, ": ", ec.message());
    if (ec == beast::error::timeout) return absl::DeadlineExceededError(msg);
    return absl::UnavailableError(msg);
  }

  void Done(absl::Status status) {
    if (done_) return;
    done_ = true;
    if (cb_.on_done) cb_.on_done(std::move(status));
  }

  std::shared_ptr<UpstreamClient::Impl> impl_;
  Endpoint ep_;
  http::request<http::string_body> req_;
  UpstreamCallbacks cb_;
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_ = false;
  bool got_head_ = false;
  bool done_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  char piece_[16 * 1024];
};

}  // namespace

UpstreamClient::UpstreamClient(UpstreamOptions options)
    : impl_(std::make_shared<Impl>(options)) {
  if (options.io_context != nullptr) return;
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] { impl->own->run(); });
  }
}

UpstreamClient::~UpstreamClient() {
  Stop();
  impl_->own.reset();
}

void UpstreamClient::Stop() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->closed = true;
    impl_->idle.clear();
  }
  impl_->work.reset();
  if (impl_->options.io_context != nullptr) return;  // its owner runs it
  impl_->own->stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

std::string EndpointKey(const Endpoint& ep) {
  return absl::StrCat(ep.host, ":", ep.port);
}

void UpstreamClient::Send(const Endpoint& to,
                          http::request<http::string_body> request,
                          UpstreamCallbacks callbacks) {
  auto call = std::make_shared<Call>(impl_, to, std::move(request),
                                     std::move(callbacks));
  // On the client's own thread (an HTTP thread sharing the context) the
  // call starts at once; elsewhere it is queued there.
  asio::dispatch(impl_->ioc, [call] { call->Start(); });
}

absl::StatusOr<UpstreamClient::Result> UpstreamClient::Fetch(
    const Endpoint& to, http::request<http::string_body> request) {
  auto result = std::make_shared<Result>();
  std::promise<absl::Status> done;
  std::future<absl::Status> finished = done.get_future();
  UpstreamCallbacks cb;
  cb.on_head = [result](const http::response_header<>& head) {
    result->status = head.result_int();
  };
  cb.on_data = [result](std::string data) { result->body += data; };
  cb.on_done = [&done](absl::Status st) { done.set_value(std::move(st)); };
  Send(to, std::move(request), std::move(cb));
  absl::Status st = finished.get();
  if (!st.ok()) return st;
  return *result;
}

int UpstreamClient::idle_connections() const {
  absl::MutexLock lock(&impl_->mu);
  int n = 0;
  for (const auto& [ep, v] : impl_->idle) n += static_cast<int>(v.size());
  return n;
}

}  // namespace gpusched::net
