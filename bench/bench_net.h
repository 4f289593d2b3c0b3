// Small helpers shared by the gateway benchmark's stub upstream and load
// generator (bench/stub_upstream.cc, bench/loadgen.cc): a monotonic clock in
// nanoseconds, non-blocking sockets, and `--name value` flags. Benchmarks
// only; nothing here is used by gpusched itself.
#ifndef GPUSCHED_BENCH_BENCH_NET_H_
#define GPUSCHED_BENCH_BENCH_NET_H_

#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

namespace gpusched::bench {

// CLOCK_MONOTONIC: the stub stamps SSE chunks with it and the load
// generator (same host) subtracts it from the arrival time.
inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

inline void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

// Appends what a non-blocking socket has to `in`; false once the peer
// closed it or it failed.
inline bool ReadAvailable(int fd, std::string* in) {
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      in->append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// `--name value` pairs; `known` lists the names with their defaults, and
// anything else is an error (printed with the usage line).
class Flags {
 public:
  Flags(int argc, char** argv, std::map<std::string, std::string> known,
        const char* usage)
      : values_(std::move(known)) {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a.substr(0, 2) != "--" || i + 1 >= argc ||
          !values_.contains(std::string(a.substr(2)))) {
        std::fprintf(stderr, "bad argument '%s'\nusage: %s %s\n", argv[i],
                     argv[0], usage);
        std::exit(2);
      }
      values_[std::string(a.substr(2))] = argv[++i];
    }
  }
  const std::string& Str(const std::string& name) const {
    return values_.at(name);
  }
  int64_t Int(const std::string& name) const {
    return std::strtoll(values_.at(name).c_str(), nullptr, 10);
  }
  double Double(const std::string& name) const {
    return std::strtod(values_.at(name).c_str(), nullptr);
  }

 private:
  std::map<std::string, std::string> values_;
};

// The integer after `"key":` (optional spaces) in a JSON text, or -1.
inline int64_t JsonInt(std::string_view text, std::string_view quoted_key) {
  size_t at = text.find(quoted_key);
  if (at == std::string_view::npos) return -1;
  at += quoted_key.size();
  while (at < text.size() && (text[at] == ' ' || text[at] == ':')) ++at;
  int64_t n = 0;
  bool any = false;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    n = n * 10 + (text[at++] - '0');
    any = true;
  }
  return any ? n : -1;
}

}  // namespace gpusched::bench

#endif  // GPUSCHED_BENCH_BENCH_NET_H_
