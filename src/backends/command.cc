#include "backends/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpusched::backends {
namespace {

Micros SteadyNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void CloseBoth(int p[2]) {
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         Micros timeout, size_t max_output) {
  if (argv.empty()) return absl::InvalidArgumentError("no command");
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
      pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    CloseBoth(in);
    CloseBoth(out);
    CloseBoth(err);
    return absl::UnavailableError(absl::StrCat("pipe: ", strerror(e)));
  }
  std::vector<char*> c_argv;
  for (const std::string& a : argv)
    c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // Async-signal-safe calls only (the parent has threads).
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvp(c_argv[0], c_argv.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return absl::UnavailableError(
        absl::StrCat("fork for ", argv[0], ": ", strerror(fork_errno)));
  }
  // stdin is written as it drains, stdout and stderr read as they fill.
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  int in_fd = in[1];
  size_t written = 0;
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  CommandResult result;
  int fds[2] = {out[0], err[0]};
  std::string* bufs[2] = {&result.out, &result.err};
  const Micros deadline = SteadyNow() + timeout;
  absl::Status failure;
  while (fds[0] >= 0 || fds[1] >= 0) {
    const Micros left = deadline - SteadyNow();
    if (left <= 0) {
      failure = absl::DeadlineExceededError(absl::StrCat(
          argv[0], " did not finish within ", timeout / 1000, " ms"));
      break;
    }
    pollfd p[3];
    int n = 0;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0) p[n++] = {fds[i], POLLIN, 0};
    }
    if (in_fd >= 0) p[n++] = {in_fd, POLLOUT, 0};
    const int r = poll(p, n, static_cast<int>(left / 1000) + 1);
    if (r < 0 && errno != EINTR) {
      failure = absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
      break;
    }
    for (int k = 0; k < n; ++k) {
      if (p[k].revents == 0) continue;
      if (p[k].fd == in_fd) {
        const ssize_t w =
            write(in_fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) ||
            written == input.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      const int i = p[k].fd == fds[0] ? 0 : 1;
      char buf[16384];
      const ssize_t got = read(fds[i], buf, sizeof buf);
      if (got > 0) {
        bufs[i]->append(buf, static_cast<size_t>(got));
        if (bufs[i]->size() > max_output) {
          failure = absl::ResourceExhaustedError(absl::StrCat(
              argv[0], " printed more than ", max_output, " bytes"));
        }
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
    if (!failure.ok()) break;
  }
  if (in_fd >= 0) close(in_fd);
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  if (!failure.ok()) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!failure.ok()) return failure;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && result.out.empty() &&
      result.err.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot run ", argv[0], " (not found or not executable)"));
  }
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return result;
}

absl::StatusOr<std::string> RunCommandOk(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         Micros timeout) {
  absl::StatusOr<CommandResult> r = RunCommand(argv, input, timeout);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    std::vector<absl::string_view> lines =
        absl::StrSplit(r->err, '\n', absl::SkipWhitespace());
    return absl::UnavailableError(absl::StrCat(
        absl::StrJoin(argv.begin(),
                      argv.begin() + std::min<size_t>(2, argv.size()), " "),
        ": exit ", r->exit_code,
        lines.empty() ? "" : absl::StrCat(": ", lines.front().substr(0, 500))));
  }
  return std::move(r->out);
}

}  // namespace gpusched::backends
