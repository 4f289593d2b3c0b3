// loadgen: the load generator of bench/gateway_vs_nginx.sh. One thread,
// epoll, C keep-alive HTTP/1.1 connections, one request in flight on each.
//
//   --mode closed  every connection sends its next request as soon as the
//                  last answer ends: the maximum throughput at C in flight.
//   --mode open    requests are scheduled at a constant --rate (request i at
//                  t0 + i/rate) and take the first free connection; latency
//                  runs from the scheduled time, so a stall delays (and
//                  counts against) every request scheduled during it, as in
//                  wrk2 (no coordinated omission).
//   --mode sse     streams ("stream": true, max_tokens = --chunks), closed
//                  loop on C connections. Per chunk: latency = arrival -
//                  the stub's "ts" stamp (same host, CLOCK_MONOTONIC), and
//                  per stream: (last chunk - first chunk) / (chunks - 1).
//                  --chunk-gap-us asks the stub to space its chunks.
//
// Latencies from requests scheduled in the first --warmup seconds are
// dropped. Prints one JSON line: requests (completed), errors (the sum of
// http_errors: whole non-200 answers; stream_errors: streams ended by an
// OpenAI error event; lost: answers cut short, streams without [DONE] or
// an error event), rps and latency percentiles in microseconds (plus chunk
// figures in sse mode).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "bench/bench_net.h"

namespace gpusched::bench {
namespace {

enum class Mode { kClosed, kOpen, kSse };

struct Conn {
  int fd = -1;
  bool busy = false;
  int64_t start_ns = 0;  // scheduled (open) or sent (closed, sse)
  std::string in;
  // The answer being parsed.
  bool in_body = false;
  bool chunked = false;
  int64_t remaining = 0;  // Content-Length body bytes left
  int status = 0;
  bool close_after = false;
  std::string events;  // SSE text not yet split into events
  int64_t first_chunk_ns = 0;
  int64_t last_chunk_ns = 0;
  int chunks = 0;
  bool saw_done = false;   // SSE: "data: [DONE]"
  bool saw_error = false;  // SSE: an error event (data: {"error": ...})
};

struct Percentiles {
  static double At(std::vector<double>& v, double q) {
    if (v.empty()) return 0;
    const size_t i = std::min(
        v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i),
                     v.end());
    return v[i];
  }
};

class LoadGen {
 public:
  explicit LoadGen(const Flags& f)
      : mode_(f.Str("mode") == "open"  ? Mode::kOpen
              : f.Str("mode") == "sse" ? Mode::kSse
                                       : Mode::kClosed),
        rate_(f.Double("rate")),
        duration_ns_(static_cast<int64_t>(f.Double("duration") * 1e9)),
        warmup_ns_(static_cast<int64_t>(f.Double("warmup") * 1e9)),
        port_(static_cast<int>(f.Int("port"))),
        connections_(static_cast<int>(f.Int("connections"))) {
    std::string body = f.Str("body");
    if (mode_ == Mode::kSse) {
      // The same body, streamed, with max_tokens = chunks.
      body = "{\"model\":\"" + f.Str("model") +
             "\",\"stream\":true,\"max_tokens\":" + f.Str("chunks") +
             ",\"stub_gap_us\":" + f.Str("chunk-gap-us") +
             ",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    }
    request_ = "POST " + f.Str("path") +
               " HTTP/1.1\r\nHost: 127.0.0.1:" + f.Str("port") +
               "\r\nContent-Type: application/json\r\n";
    if (!f.Str("key").empty()) {
      request_ += "Authorization: Bearer " + f.Str("key") + "\r\n";
    }
    request_ += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    request_ += body;
  }

  int Run() {
    ep_ = epoll_create1(0);
    conns_.resize(static_cast<size_t>(connections_));
    for (Conn& c : conns_) {
      if (!Connect(c)) return 1;
    }
    t0_ = NowNs();
    const int64_t end = t0_ + duration_ns_;
    if (mode_ != Mode::kOpen) {
      for (Conn& c : conns_) Send(c, NowNs());
    }
    std::vector<epoll_event> events(1024);
    int64_t next = 0;  // index of the next scheduled request (open loop)
    const double interval = rate_ > 0 ? 1e9 / rate_ : 1e9;
    for (;;) {
      const int64_t now = NowNs();
      if (now >= end) {
        // Let what is in flight finish (2 s at most); new sends stop.
        if (draining_until_ == 0) draining_until_ = now + 2'000'000'000;
        if (InFlight() == 0 || now >= draining_until_) break;
      }
      int64_t wake = draining_until_ ? draining_until_ : end;
      if (mode_ == Mode::kOpen && draining_until_ == 0) {
        for (int64_t due = t0_ + static_cast<int64_t>(next * interval);
             due <= now; due = t0_ + static_cast<int64_t>(next * interval)) {
          backlog_.push_back(due);
          ++next;
        }
        while (!backlog_.empty() && !idle_.empty()) {
          Conn& c = *idle_.back();
          idle_.pop_back();
          Send(c, backlog_.front());
          backlog_.pop_front();
        }
        wake = std::min(wake, t0_ + static_cast<int64_t>(next * interval));
      }
      const int64_t wait = std::max<int64_t>(0, wake - NowNs());
      timespec ts{wait / 1'000'000'000, wait % 1'000'000'000};
      const int n = epoll_pwait2(ep_, events.data(),
                                 static_cast<int>(events.size()), &ts, nullptr);
      for (int i = 0; i < n; ++i) {
        Read(conns_[events[i].data.u32]);
      }
    }
    Report();
    return 0;
  }

 private:
  bool Connect(Conn& c) {
    if (c.fd >= 0) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
    }
    c = Conn{};
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("loadgen: connect");
      return false;
    }
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    SetNonBlocking(c.fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(&c - conns_.data());
    epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
    idle_.push_back(&c);
    return true;
  }

  int InFlight() const {
    int n = 0;
    for (const Conn& c : conns_) n += c.busy ? 1 : 0;
    return n;
  }

  void Send(Conn& c, int64_t start_ns) {
    if (mode_ != Mode::kOpen) {
      std::erase(idle_, &c);
    }
    c.busy = true;
    c.start_ns = start_ns;
    c.chunks = 0;
    c.saw_done = c.saw_error = false;
    // Requests are small: one send() on an idle connection takes them.
    const ssize_t n =
        send(c.fd, request_.data(), request_.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(request_.size())) {
      ++lost_;
      Reconnect(c);
    }
  }

  void Reconnect(Conn& c) {
    const size_t index = static_cast<size_t>(&c - conns_.data());
    std::erase(idle_, &c);
    if (!Connect(conns_[index])) std::exit(1);
    if (mode_ != Mode::kOpen && NowNs() < t0_ + duration_ns_) {
      Send(conns_[index], NowNs());
    }
  }

  void Read(Conn& c) {
    if (!ReadAvailable(c.fd, &c.in)) {
      if (c.busy) ++lost_;  // closed without a whole answer
      c.busy = false;
      Reconnect(c);
      return;
    }
    Parse(c, NowNs());
  }

  // Consumes complete parts of the answer in c.in.
  void Parse(Conn& c, int64_t now) {
    for (;;) {
      if (!c.in_body) {
        const size_t end = c.in.find("\r\n\r\n");
        if (end == std::string::npos) return;
        std::string head = c.in.substr(0, end);
        for (char& ch : head) ch = static_cast<char>(std::tolower(ch));
        c.status = std::atoi(head.c_str() + 9);
        c.chunked =
            head.find("transfer-encoding: chunked") != std::string::npos;
        c.close_after = head.find("connection: close") != std::string::npos;
        const size_t cl = head.find("content-length:");
        c.remaining =
            cl == std::string::npos ? 0 : std::atoll(head.c_str() + cl + 15);
        c.in.erase(0, end + 4);
        c.in_body = true;
        c.events.clear();
      }
      if (!c.chunked) {
        if (static_cast<int64_t>(c.in.size()) < c.remaining) return;
        c.in.erase(0, static_cast<size_t>(c.remaining));
        Complete(c, now);
        if (c.fd < 0 || c.in.empty()) return;
        continue;
      }
      // Chunked: size line, data, CRLF; a zero chunk ends the answer.
      const size_t line = c.in.find("\r\n");
      if (line == std::string::npos) return;
      const int64_t size = std::strtoll(c.in.c_str(), nullptr, 16);
      if (c.in.size() < line + 2 + static_cast<size_t>(size) + 2) return;
      if (size == 0) {
        c.in.erase(0, line + 4);
        Complete(c, now);
        if (c.fd < 0 || c.in.empty()) return;
        continue;
      }
      if (mode_ == Mode::kSse) {
        c.events.append(c.in, line + 2, static_cast<size_t>(size));
        Events(c, now);
      }
      c.in.erase(0, line + 2 + static_cast<size_t>(size) + 2);
    }
  }

  // Splits SSE events and records each stamped chunk's latency.
  void Events(Conn& c, int64_t now) {
    size_t at;
    while ((at = c.events.find("\n\n")) != std::string::npos) {
      const std::string_view event(c.events.data(), at);
      if (event.find("data: [DONE]") != std::string_view::npos) {
        c.saw_done = true;
      }
      if (event.find("data: {\"error\"") != std::string_view::npos) {
        c.saw_error = true;
      }
      const int64_t ts = JsonInt(event, "\"ts\"");
      if (ts > 0) {
        if (c.chunks == 0) c.first_chunk_ns = now;
        c.last_chunk_ns = now;
        ++c.chunks;
        if (c.start_ns >= t0_ + warmup_ns_) {
          chunk_lat_.push_back(static_cast<double>(now - ts) / 1e3);
        }
      }
      c.events.erase(0, at + 2);
    }
  }

  void Complete(Conn& c, int64_t now) {
    c.in_body = false;
    c.busy = false;
    if (c.status != 200) {
      ++http_errors_;  // a whole answer: a clear error
    } else if (mode_ == Mode::kSse && !c.saw_done) {
      // A stream ends with [DONE], or with an error event (a clear error);
      // without either it was cut short.
      ++(c.saw_error ? stream_errors_ : lost_);
    } else if (c.start_ns >= t0_ + warmup_ns_) {
      ++completed_;
      lat_.push_back(static_cast<double>(now - c.start_ns) / 1e3);
      if (mode_ == Mode::kSse && c.chunks > 1) {
        per_chunk_.push_back(
            static_cast<double>(c.last_chunk_ns - c.first_chunk_ns) / 1e3 /
            (c.chunks - 1));
      }
    }
    if (c.close_after) {
      Reconnect(c);
      return;
    }
    if (mode_ == Mode::kOpen) {
      if (!backlog_.empty() && draining_until_ == 0) {
        const int64_t due = backlog_.front();
        backlog_.pop_front();
        Send(c, due);
      } else {
        idle_.push_back(&c);
      }
    } else if (draining_until_ == 0 && now < t0_ + duration_ns_) {
      Send(c, now);
    }
  }

  void Report() {
    const double seconds = static_cast<double>(duration_ns_ - warmup_ns_) / 1e9;
    std::printf(
        "{\"mode\":\"%s\",\"connections\":%d,\"target_rps\":%.0f,"
        "\"requests\":%lld,\"errors\":%lld,\"http_errors\":%lld,"
        "\"stream_errors\":%lld,\"lost\":%lld,\"rps\":%.1f,\"p50_us\":%.1f,"
        "\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f",
        mode_ == Mode::kOpen  ? "open"
        : mode_ == Mode::kSse ? "sse"
                              : "closed",
        connections_, rate_, static_cast<long long>(completed_),
        static_cast<long long>(http_errors_ + stream_errors_ + lost_),
        static_cast<long long>(http_errors_),
        static_cast<long long>(stream_errors_), static_cast<long long>(lost_),
        static_cast<double>(completed_) / seconds, Percentiles::At(lat_, 0.5),
        Percentiles::At(lat_, 0.9), Percentiles::At(lat_, 0.99),
        Percentiles::At(lat_, 0.999),
        lat_.empty() ? 0 : *std::max_element(lat_.begin(), lat_.end()));
    if (mode_ == Mode::kSse) {
      std::printf(
          ",\"chunks\":%zu,\"chunk_p50_us\":%.1f,\"chunk_p99_us\":%.1f,"
          "\"interval_p50_us\":%.2f",
          chunk_lat_.size(), Percentiles::At(chunk_lat_, 0.5),
          Percentiles::At(chunk_lat_, 0.99), Percentiles::At(per_chunk_, 0.5));
    }
    std::printf("}\n");
  }

  const Mode mode_;
  const double rate_;
  const int64_t duration_ns_;
  const int64_t warmup_ns_;
  const int port_;
  const int connections_;
  std::string request_;
  int ep_ = -1;
  int64_t t0_ = 0;
  int64_t draining_until_ = 0;
  std::vector<Conn> conns_;
  std::vector<Conn*> idle_;
  std::deque<int64_t> backlog_;  // scheduled start times not yet sent
  int64_t completed_ = 0;
  // Every request ends as one of: completed, an HTTP error answer, a
  // stream ended by an error event, or lost (the connection closed before
  // a whole answer, or a stream without [DONE] or an error event).
  int64_t http_errors_ = 0;
  int64_t stream_errors_ = 0;
  int64_t lost_ = 0;
  std::vector<double> lat_;
  std::vector<double> chunk_lat_;
  std::vector<double> per_chunk_;
};

}  // namespace
}  // namespace gpusched::bench

int main(int argc, char** argv) {
  gpusched::bench::Flags flags(
      argc, argv,
      {{"mode", "closed"},
       {"port", "0"},
       {"path", "/v1/chat/completions"},
       {"key", ""},
       {"model", "stub"},
       {"body",
        R"({"model":"stub","max_tokens":1,"messages":[{"role":"user","content":"hello"}]})"},
       {"connections", "32"},
       {"rate", "1000"},
       {"duration", "5"},
       {"warmup", "1"},
       {"chunks", "32"},
       {"chunk-gap-us", "0"}},
      "--port P [--mode closed|open|sse] [--connections C] [--rate R] "
      "[--duration S] [--warmup S] [--key K] [--model M] [--body JSON] "
      "[--path P] [--chunks K] [--chunk-gap-us G]");
  return gpusched::bench::LoadGen(flags).Run();
}
