// Processes and probes for the stand-in's kubelet (apiserver.h): $(VAR)
// expansion, resource quantities, fork/exec of a container's command, and
// the TCP and HTTP checks of readiness probes (plain sockets with short
// timeouts, run on the kubelet's prober thread, never on the API server's
// I/O threads).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/kube/apiserver.h"

extern char** environ;

namespace gpusched::kubetest {

using std::chrono::milliseconds;

std::string ExpandVars(
    absl::string_view in,
    const std::function<std::optional<std::string>(const std::string&)>&
        lookup) {
  // k8s.io/kubernetes third_party/forked/golang/expansion.
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$' || i + 1 >= in.size()) {
      out += in[i];
      continue;
    }
    const char next = in[i + 1];
    if (next == '$') {  // escaped
      out += '$';
      ++i;
    } else if (next == '(') {
      const size_t close = in.find(')', i + 2);
      if (close == absl::string_view::npos) {
        out += "$(";
        ++i;
        continue;
      }
      const std::string name(in.substr(i + 2, close - i - 2));
      const std::optional<std::string> v = lookup(name);
      out += v ? *v : absl::StrCat("$(", name, ")");
      i = close;
    } else {
      out += '$';
      out += next;
      ++i;
    }
  }
  return out;
}

std::optional<int64_t> ParseQuantityMilli(const json& q) {
  long double v = 0;
  if (q.is_number()) {
    v = q.get<double>();
  } else if (q.is_string()) {
    const std::string s = q.get<std::string>();
    size_t i = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    while (i < s.size() && (absl::ascii_isdigit(s[i]) || s[i] == '.')) ++i;
    const std::string number = s.substr(0, i), suffix = s.substr(i);
    if (number.empty() || number == "." || number == "+" || number == "-") {
      return std::nullopt;
    }
    char* end = nullptr;
    v = std::strtold(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return std::nullopt;
    static const std::map<std::string, long double> kSuffixes = {
        {"", 1},
        {"n", 1e-9L},
        {"u", 1e-6L},
        {"m", 1e-3L},
        {"k", 1e3L},
        {"M", 1e6L},
        {"G", 1e9L},
        {"T", 1e12L},
        {"P", 1e15L},
        {"E", 1e18L},
        {"Ki", 1024.0L},
        {"Mi", 1024.0L * 1024},
        {"Gi", 1024.0L * 1024 * 1024},
        {"Ti", 1024.0L * 1024 * 1024 * 1024},
        {"Pi", 1024.0L * 1024 * 1024 * 1024 * 1024},
        {"Ei", 1024.0L * 1024 * 1024 * 1024 * 1024 * 1024}};
    if (auto it = kSuffixes.find(suffix); it != kSuffixes.end()) {
      v *= it->second;
    } else if (suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
      int exp = 0;
      if (!absl::SimpleAtoi(suffix.substr(1), &exp)) return std::nullopt;
      v *= std::pow(10.0L, exp);
    } else {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  const long double milli = std::ceil(v * 1000);
  if (milli >= 9.2e18L) return INT64_MAX;
  if (milli <= -9.2e18L) return INT64_MIN;
  return static_cast<int64_t>(milli);
}

void SignalGroup(pid_t pid, int sig) {
  if (pid <= 0) return;
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

// fork + execve of argv with `env` over this program's environment, in a
// new session. Only async-signal-safe calls between fork and exec; an exec
// failure comes back through a close-on-exec pipe.
Spawned Spawn(const std::vector<std::string>& argv,
              const std::vector<std::pair<std::string, std::string>>& env,
              const std::string& workdir, const std::string& log_path) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq != absl::string_view::npos) {
      merged[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
  }
  for (const auto& [k, v] : env) merged[k] = v;
  // argv[0] is looked up in the container's PATH, as a runtime does.
  std::string path = argv[0];
  if (path.find('/') == std::string::npos) {
    const std::string search =
        merged.contains("PATH")
            ? merged["PATH"]
            : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    path.clear();
    for (absl::string_view dir : absl::StrSplit(search, ':')) {
      const std::string candidate =
          absl::StrCat(dir.empty() ? "." : dir, "/", argv[0]);
      struct stat st;
      if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
    }
    if (path.empty()) {
      return {0, absl::StrCat("exec: \"", argv[0],
                              "\": executable file not found in $PATH")};
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged)
    env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv)
    cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env_strings) {
    cenv.push_back(const_cast<char*>(e.c_str()));
  }
  cenv.push_back(nullptr);
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = log_path.empty()
                      ? open("/dev/null", O_WRONLY | O_CLOEXEC)
                      : open(log_path.c_str(),
                             O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int errp[2] = {-1, -1};
  if (in < 0 || out < 0 || pipe2(errp, O_CLOEXEC) != 0) {
    const std::string why =
        absl::StrCat("cannot open ", out < 0 ? log_path : "/dev/null", ": ",
                     std::strerror(errno));
    for (int fd : {in, out, errp[0], errp[1]}) {
      if (fd >= 0) close(fd);
    }
    return {0, why};
  }
  const long max_fd = std::min(sysconf(_SC_OPEN_MAX), 65536L);
  const char* wd = workdir.empty() ? nullptr : workdir.c_str();
  sigset_t none;
  sigemptyset(&none);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int err = 0;
    if (wd != nullptr && chdir(wd) != 0) {
      err = errno;
      (void)!write(errp[1], &err, sizeof(err));
      _exit(127);
    }
    // Nothing of the server's (its sockets) leaks into the container.
    if (close_range(3, errp[1] - 1, 0) != 0 ||
        close_range(errp[1] + 1, ~0U, 0) != 0) {
      for (int fd = 3; fd < max_fd; ++fd) {
        if (fd != errp[1]) close(fd);
      }
    }
    execve(path.c_str(), cargv.data(), cenv.data());
    err = errno;
    (void)!write(errp[1], &err, sizeof(err));
    _exit(127);
  }
  const int fork_errno = errno;
  close(errp[1]);
  close(in);
  close(out);
  if (pid < 0) {
    close(errp[0]);
    return {0, absl::StrCat("fork: ", std::strerror(fork_errno))};
  }
  int err = 0;
  ssize_t n;
  do {
    n = read(errp[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(errp[0]);
  if (n > 0) {
    waitpid(pid, nullptr, 0);
    return {0, absl::StrCat(wd != nullptr ? "chdir or exec" : "exec", ": \"",
                            path, "\": ", std::strerror(err))};
  }
  return {pid, ""};
}

int ConnectWithin(const std::string& host, int port, milliseconds timeout) {
  in_addr addr;
  if (inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(),
                &addr) != 1 ||
      port <= 0 || port > 65535) {
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr = addr;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (errno != EINPROGRESS ||
        poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

// GET path; true for a 2xx or 3xx status.
bool HttpGet(const std::string& host, int port, const std::string& path,
             const std::vector<std::string>& headers, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<milliseconds>(
                                 deadline - std::chrono::steady_clock::now())
                                 .count()));
  };
  const int fd = ConnectWithin(host, port, timeout);
  if (fd < 0) return false;
  std::string req = absl::StrCat("GET ", path.empty() ? "/" : path,
                                 " HTTP/1.1\r\nHost: ", host, ":", port,
                                 "\r\nUser-Agent: kube-probe/1.30\r\n");
  bool has_accept = false;
  for (const std::string& h : headers) {
    absl::StrAppend(&req, h, "\r\n");
    if (absl::StartsWithIgnoreCase(h, "accept:")) has_accept = true;
  }
  if (!has_accept) req += "Accept: */*\r\n";
  req += "Connection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < req.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, left()) != 1) break;
    const ssize_t n =
        send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string got;
  while (sent == req.size() && got.find("\r\n") == std::string::npos &&
         got.size() < 4096) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left()) != 1) break;
    char buf[1024];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  int code = 0;
  if (got.starts_with("HTTP/1.") && got.size() >= 12) {
    (void)absl::SimpleAtoi(got.substr(9, 3), &code);
  }
  return code >= 200 && code < 400;
}

}  // namespace gpusched::kubetest
