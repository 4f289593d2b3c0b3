#include "backends/local/local_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace gpusched::backends {
namespace {

// Used when neither the spec nor the launcher's environment has a PATH (the
// same default glibc's execvp uses, minus the current directory).
constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";

std::string ErrnoText(int err) { return std::strerror(err); }

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status ValidateName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("bad process name \"", name, "\""));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad process name \"", name,
                       "\": letters, digits and \"._-\" only (it names the "
                       "log files)"));
    }
  }
  return absl::OkStatus();
}

// The child's environment as "KEY=VALUE" strings: the inherited one with the
// overrides replacing same-named entries, then the new ones in name order.
std::vector<std::string> BuildEnv(const ProcessSpec& spec) {
  std::vector<std::string> env;
  if (spec.inherit_env && environ != nullptr) {
    for (char** e = environ; *e != nullptr; ++e) {
      absl::string_view entry(*e);
      const size_t eq = entry.find('=');
      const std::string key(entry.substr(0, eq));
      if (spec.env.contains(key)) continue;
      env.emplace_back(entry);
    }
  }
  std::vector<std::pair<std::string, std::string>> overrides(spec.env.begin(),
                                                             spec.env.end());
  std::sort(overrides.begin(), overrides.end());
  for (const auto& [key, value] : overrides) {
    env.push_back(absl::StrCat(key, "=", value));
  }
  return env;
}

std::string PathOf(const std::vector<std::string>& env) {
  for (const std::string& entry : env) {
    if (absl::StartsWith(entry, "PATH=")) return entry.substr(5);
  }
  return kDefaultPath;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.string();
}

// The absolute path execve gets for `program`: a path with a '/' is taken
// relative to `cwd`; a bare name is looked up in `path_var`.
absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::string& cwd,
                                           const std::string& path_var) {
  if (program.find('/') != std::string::npos) {
    std::string path = program;
    if (program.front() != '/' && !cwd.empty()) {
      path = absl::StrCat(cwd, "/", program);
    }
    path = Absolute(path);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat("executable \"", program, "\" not found (", path, ")"));
    }
    if (!IsExecutableFile(path)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "\"", program, "\" is not an executable file (", path, ")"));
    }
    return path;
  }
  for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
    if (dir.empty()) continue;  // never the current directory implicitly
    const std::string candidate = Absolute(absl::StrCat(dir, "/", program));
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      "executable \"", program, "\" not found in PATH (", path_var, ")"));
}

absl::StatusOr<int> OpenLog(const std::string& path) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open log file ", path, ": ", ErrnoText(errno)));
  }
  return fd;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Sends `sig` to the process group led by `id`; the leader (perhaps a
// zombie not yet reaped) keeps the group id from being reused.
void SignalGroup(ProcessId id, int sig) { kill(-static_cast<pid_t>(id), sig); }

// True when the child has exited (not yet reaped); does not reap it.
bool HasExited(ProcessId id) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  const int rc =
      waitid(P_PID, static_cast<id_t>(id), &info, WEXITED | WNOHANG | WNOWAIT);
  if (rc != 0) return errno == ECHILD;  // already reaped by someone else
  return info.si_pid == static_cast<pid_t>(id);
}

// Blocks until the (exited or killed) child is reaped; returns its status.
int Reap(ProcessId id) {
  int status = 0;
  while (waitpid(static_cast<pid_t>(id), &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// The forked child: its own process group, signals default and unblocked,
// stdin /dev/null, stdout/stderr to the logs, no other descriptor, and
// SIGKILL when gpusched dies (PR_SET_PDEATHSIG: a gpusched killed outright
// leaves no engine behind). On failure writes errno to `report`. Only
// async-signal-safe calls: the parent has threads.
[[noreturn]] void ChildExec(const char* program, char* const argv[],
                            char* const envp[], const char* cwd, int out,
                            int err, int report, pid_t parent) {
  auto fail = [&](int e) {
    ssize_t ignored = write(report, &e, sizeof e);
    (void)ignored;
    _exit(127);
  };
  if (setpgid(0, 0) != 0) fail(errno);
  // Dies with gpusched; if gpusched died before this line, do not start.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (getppid() != parent) _exit(127);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int in = open("/dev/null", O_RDONLY);
  if (in < 0) fail(errno);
  if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
      dup2(err, STDERR_FILENO) < 0) {
    fail(errno);
  }
  // Nothing the daemon holds (sockets, the store) leaks into an engine;
  // `report` is close-on-exec, so it is closed only by a successful exec.
  for (int fd = STDERR_FILENO + 1; fd < report; ++fd) close(fd);
  if (syscall(SYS_close_range, report + 1, ~0U, 0) != 0) {
    for (int fd = report + 1; fd < 65536; ++fd) close(fd);  // kernel < 5.9
  }
  if (cwd != nullptr && chdir(cwd) != 0) fail(errno);
  execve(program, argv, envp);
  fail(errno);
  _exit(127);  // not reached
}

}  // namespace

LocalLauncher::~LocalLauncher() {
  for (const auto& [id, child] : children_) SignalGroup(id, SIGKILL);
  for (const auto& [id, child] : children_) Reap(id);
}

absl::StatusOr<ProcessId> LocalLauncher::Start(const ProcessSpec& spec) {
  if (absl::Status s = ValidateName(spec.name); !s.ok()) return s;
  if (spec.argv.empty() || spec.argv.front().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("process \"", spec.name, "\": empty argv"));
  }
  if (!spec.cwd.empty()) {
    struct stat st;
    if (stat(spec.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("process \"", spec.name,
                                              "\": working directory ",
                                              spec.cwd, " is not a directory"));
    }
  }
  std::vector<std::string> env = BuildEnv(spec);
  absl::StatusOr<std::string> program =
      ResolveProgram(spec.argv.front(), spec.cwd, PathOf(env));
  if (!program.ok()) return program.status();

  std::string out_path = "/dev/null";
  std::string err_path = "/dev/null";
  if (!spec.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(spec.log_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create log directory ", spec.log_dir, ": ", ec.message()));
    }
    out_path = absl::StrCat(spec.log_dir, "/", spec.name, ".out");
    err_path = absl::StrCat(spec.log_dir, "/", spec.name, ".err");
  }
  absl::StatusOr<int> out_fd = OpenLog(out_path);
  if (!out_fd.ok()) return out_fd.status();
  Fd out(*out_fd);
  absl::StatusOr<int> err_fd = OpenLog(err_path);
  if (!err_fd.ok()) return err_fd.status();
  Fd err(*err_fd);

  std::vector<std::string> argv = spec.argv;
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(env);
  // The child tells an exec failure through this pipe (closed on exec).
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot start \"", spec.name,
                                            "\": pipe: ", ErrnoText(errno)));
  }
  const pid_t parent = getpid();
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child of a threaded process: async-signal-safe calls only.
    ChildExec(program->c_str(), c_argv.data(), c_env.data(), cwd, out.get(),
              err.get(), report[1], parent);
  }
  const int fork_errno = errno;
  close(report[1]);
  Fd report_read(report[0]);
  if (pid < 0) {
    return absl::InternalError(absl::StrCat(
        "cannot start \"", spec.name, "\": fork: ", ErrnoText(fork_errno)));
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::InternalError(absl::StrCat("cannot start \"", spec.name,
                                            "\" (", *program,
                                            "): ", ErrnoText(child_errno)));
  }
  children_[pid] = Child{.name = spec.name};
  return static_cast<ProcessId>(pid);
}

std::vector<ExitEvent> LocalLauncher::Poll() {
  std::vector<ProcessId> exited;
  for (const auto& [id, child] : children_) {
    if (HasExited(id)) exited.push_back(id);
  }
  std::sort(exited.begin(), exited.end());
  std::vector<ExitEvent> events;
  events.reserve(exited.size());
  for (ProcessId id : exited) {
    auto it = children_.find(id);
    // The leader is a zombie: its group id cannot be reused yet, so this
    // reaches only the engine's leftover workers.
    SignalGroup(id, SIGKILL);
    const int status = Reap(id);
    ExitEvent event;
    event.id = id;
    event.name = it->second.name;
    event.stop_requested = it->second.stop_requested;
    if (status >= 0 && WIFSIGNALED(status)) {
      event.signaled = true;
      event.signal = WTERMSIG(status);
    } else if (status >= 0 && WIFEXITED(status)) {
      event.exit_code = WEXITSTATUS(status);
    } else {
      event.exit_code = -1;  // reaped elsewhere (SIGCHLD ignored?)
    }
    events.push_back(std::move(event));
    children_.erase(it);
  }
  return events;
}

absl::Status LocalLauncher::Stop(ProcessId id, Micros grace, Micros now) {
  auto it = children_.find(id);
  if (it == children_.end()) {
    return absl::NotFoundError(absl::StrCat("no running process ", id));
  }
  Child& child = it->second;
  if (grace <= 0) return Kill(id);
  child.stop_requested = true;
  const Micros deadline = grace >= kNever - now ? kNever : now + grace;
  child.kill_deadline = std::min(child.kill_deadline, deadline);
  SignalGroup(id, SIGTERM);
  return absl::OkStatus();
}

absl::Status LocalLauncher::Kill(ProcessId id) {
  auto it = children_.find(id);
  if (it == children_.end()) {
    return absl::NotFoundError(absl::StrCat("no running process ", id));
  }
  it->second.stop_requested = true;
  it->second.killed = true;
  SignalGroup(id, SIGKILL);
  return absl::OkStatus();
}

Micros LocalLauncher::Tick(Micros now) {
  Micros next = kNever;
  for (auto& [id, child] : children_) {
    if (child.killed || child.kill_deadline == kNever) continue;
    if (child.kill_deadline <= now) {
      child.killed = true;
      if (!HasExited(id)) SignalGroup(id, SIGKILL);
    } else {
      next = std::min(next, child.kill_deadline);
    }
  }
  return next;
}

bool LocalLauncher::IsAlive(ProcessId id) const {
  return children_.contains(id) && !HasExited(id);
}

}  // namespace gpusched::backends
