// stub_upstream: the fastest engine we can stand behind a proxy, for
// bench/gateway_vs_nginx.sh. One thread, epoll, HTTP/1.1 keep-alive.
//
// Any POST answers with a fixed small OpenAI chat completion (with usage).
// With "stream": true in the body it answers an SSE stream of K chunk events
// (K = the body's max_tokens, else --chunks), each in its own HTTP chunk and
// its own send(), carrying "ts": the CLOCK_MONOTONIC nanoseconds when it was
// sent (the load generator on the same host computes per-chunk latency from
// it); then a usage event and [DONE]. --chunk-gap-us G spaces the chunks G
// microseconds apart (0: back to back; a body field "stub_gap_us" sets it
// per request). GET /stub/peak answers the most streams in progress at once
// since the last such GET (what gateways let through a concurrency limit);
// any other GET answers 200 "ok".
//
// Prints "listening on PORT" once ready; runs until killed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench_net.h"

namespace gpusched::bench {
namespace {

constexpr std::string_view kCompletion =
    R"({"id":"chatcmpl-stub","object":"chat.completion","created":1,)"
    R"("model":"stub","choices":[{"index":0,"message":{"role":"assistant",)"
    R"("content":"ok"},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}})";

struct Conn {
  int fd = -1;
  std::string in;
  std::string out;
  bool want_out = false;  // EPOLLOUT registered
  bool close_after = false;
  // A stream in progress: chunks left to send and when the next is due.
  int chunks_left = 0;
  int chunks_total = 0;
  int64_t gap_ns = 0;
  int64_t next_chunk_ns = 0;
};

class Stub {
 public:
  Stub(int default_chunks, int64_t gap_ns)
      : default_chunks_(default_chunks), gap_ns_(gap_ns) {}

  int Run(int port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
            0 ||
        listen(listen_fd_, 4096) != 0) {
      std::perror("stub_upstream: listen");
      return 1;
    }
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    SetNonBlocking(listen_fd_);
    ep_ = epoll_create1(0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd_;
    epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev);
    std::printf("listening on %d\n", ntohs(addr.sin_port));
    std::fflush(stdout);
    std::vector<epoll_event> events(256);
    for (;;) {
      timespec timeout{};
      timespec* tp = nullptr;
      if (!due_.empty()) {
        const int64_t wait = std::max<int64_t>(0, due_.top().first - NowNs());
        timeout.tv_sec = wait / 1'000'000'000;
        timeout.tv_nsec = wait % 1'000'000'000;
        tp = &timeout;
      }
      const int n = epoll_pwait2(ep_, events.data(),
                                 static_cast<int>(events.size()), tp, nullptr);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd_) {
          Accept();
          continue;
        }
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          Close(c);
          continue;
        }
        if (events[i].events & EPOLLOUT) Flush(c);
        if (events[i].events & EPOLLIN) Read(c);
      }
      RunDueChunks();
    }
  }

 private:
  void Accept() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) return;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
      conns_[fd] = std::move(c);
    }
  }

  void Close(Conn& c) {
    if (c.chunks_left > 0) --streams_;  // cut mid-stream
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    conns_.erase(c.fd);  // destroys c
  }

  void Read(Conn& c) {
    if (!ReadAvailable(c.fd, &c.in)) {
      Close(c);
      return;
    }
    // Requests arrive one at a time per connection (no pipelining from our
    // proxies), but handle several if they come.
    while (c.chunks_left == 0) {
      const size_t head_end = c.in.find("\r\n\r\n");
      if (head_end == std::string::npos) break;
      std::string_view head(c.in.data(), head_end);
      int64_t length = 0;
      for (std::string_view name : {"Content-Length:", "content-length:"}) {
        const size_t at = head.find(name);
        if (at != std::string_view::npos) {
          length = std::strtoll(head.data() + at + name.size(), nullptr, 10);
        }
      }
      const size_t total = head_end + 4 + static_cast<size_t>(length);
      if (c.in.size() < total) break;
      const std::string_view body(c.in.data() + head_end + 4,
                                  static_cast<size_t>(length));
      c.close_after =
          head.find("Connection: close") != std::string_view::npos ||
          head.find("connection: close") != std::string_view::npos;
      if (head.substr(0, 15) == "GET /stub/peak ") {
        // The most streams in progress at once since the last ask.
        const std::string n = std::to_string(peak_);
        peak_ = streams_;
        c.out +=
            "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(n.size()) +
            "\r\n\r\n" + n;
      } else if (head.substr(0, 4) == "GET ") {
        c.out += "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      } else if (IsStream(body)) {
        const int64_t k = JsonInt(body, "\"max_tokens\"");
        c.chunks_total = c.chunks_left =
            static_cast<int>(k > 0 ? k : default_chunks_);
        peak_ = std::max(peak_, ++streams_);
        c.out +=
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
        const int64_t gap_us = JsonInt(body, "\"stub_gap_us\"");
        c.gap_ns = gap_us >= 0 ? gap_us * 1000 : gap_ns_;
        c.next_chunk_ns = NowNs() + c.gap_ns;
      } else {
        c.out += "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
        c.out += "Content-Length: " + std::to_string(kCompletion.size()) +
                 "\r\n\r\n";
        c.out += kCompletion;
      }
      c.in.erase(0, total);
    }
    if (!Flush(c)) return;
    if (c.chunks_left > 0) {
      if (c.gap_ns == 0) {
        SendChunks(c);
      } else {
        due_.push({c.next_chunk_ns, c.fd});
      }
    }
  }

  static bool IsStream(std::string_view body) {
    const size_t at = body.find("\"stream\"");
    if (at == std::string_view::npos) return false;
    size_t p = at + 8;
    while (p < body.size() && (body[p] == ' ' || body[p] == ':')) ++p;
    return p < body.size() && body[p] == 't';
  }

  // Sends the due chunks of `c` (all of them when there is no gap).
  void SendChunks(Conn& c) {
    const int fd = c.fd;
    while (c.chunks_left > 0) {
      const int64_t now = NowNs();
      if (c.gap_ns > 0 && c.next_chunk_ns > now) {
        due_.push({c.next_chunk_ns, fd});
        return;
      }
      --c.chunks_left;
      char event[256];
      const int n = std::snprintf(
          event, sizeof(event),
          "data: {\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion."
          "chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}],"
          "\"ts\":%lld}\n\n",
          static_cast<long long>(NowNs()));
      char frame[16];
      const int f = std::snprintf(frame, sizeof(frame), "%x\r\n", n);
      c.out.append(frame, f);
      c.out.append(event, n);
      c.out += "\r\n";
      if (c.chunks_left == 0) {
        --streams_;
        char usage[160];
        const int u = std::snprintf(
            usage, sizeof(usage),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,"
            "\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: "
            "[DONE]\n\n",
            c.chunks_total, c.chunks_total + 8);
        const int uf = std::snprintf(frame, sizeof(frame), "%x\r\n", u);
        c.out.append(frame, uf);
        c.out.append(usage, u);
        c.out += "\r\n0\r\n\r\n";
      }
      c.next_chunk_ns += c.gap_ns;
      if (!Flush(c)) return;  // closed
    }
    if (!c.in.empty()) Read(c);  // a request that came during the stream
  }

  void RunDueChunks() {
    const int64_t now = NowNs();
    while (!due_.empty() && due_.top().first <= now) {
      const int fd = due_.top().second;
      due_.pop();
      auto it = conns_.find(fd);
      if (it != conns_.end() && it->second->chunks_left > 0) {
        SendChunks(*it->second);
      }
    }
  }

  // Writes what is queued; false if the connection was closed.
  bool Flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        Close(c);
        return false;
      }
      c.out.erase(0, static_cast<size_t>(n));
    }
    const bool want = !c.out.empty();
    if (want != c.want_out) {
      c.want_out = want;
      epoll_event ev{};
      ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
      ev.data.fd = c.fd;
      epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    }
    if (!want && c.close_after && c.chunks_left == 0) {
      Close(c);
      return false;
    }
    return true;
  }

  const int default_chunks_;
  const int64_t gap_ns_;
  int listen_fd_ = -1;
  int ep_ = -1;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  // (due time, fd) of spaced stream chunks, earliest first.
  std::priority_queue<std::pair<int64_t, int>,
                      std::vector<std::pair<int64_t, int>>, std::greater<>>
      due_;
  int streams_ = 0;  // streams in progress
  int peak_ = 0;     // the most at once since GET /stub/peak
};

}  // namespace
}  // namespace gpusched::bench

int main(int argc, char** argv) {
  using gpusched::bench::Flags;
  Flags flags(argc, argv,
              {{"port", "0"}, {"chunks", "64"}, {"chunk-gap-us", "0"}},
              "[--port P] [--chunks K] [--chunk-gap-us G]");
  gpusched::bench::Stub stub(static_cast<int>(flags.Int("chunks")),
                             flags.Int("chunk-gap-us") * 1000);
  return stub.Run(static_cast<int>(flags.Int("port")));
}
