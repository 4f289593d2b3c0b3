#include "backends/local/local_launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::backends {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// These tests run real child processes, so they wait for them: in 10 ms
// steps, never longer than kMaxWait. Nothing asserts on elapsed time.
constexpr auto kStep = std::chrono::milliseconds(10);
constexpr auto kMaxWait = std::chrono::seconds(3);

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "launcher_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  ProcessSpec Spec(std::string name, std::vector<std::string> argv) {
    ProcessSpec spec;
    spec.name = std::move(name);
    spec.argv = std::move(argv);
    spec.log_dir = dir_ + "/logs";
    return spec;
  }

  std::string ReadLog(const std::string& name, const std::string& ext) {
    std::ifstream in(dir_ + "/logs/" + name + "." + ext);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Polls until `id` exits; nullopt after kMaxWait.
  std::optional<ExitEvent> WaitForExit(LocalLauncher& launcher, ProcessId id) {
    const auto give_up = std::chrono::steady_clock::now() + kMaxWait;
    while (std::chrono::steady_clock::now() < give_up) {
      for (ExitEvent& e : launcher.Poll()) {
        if (e.id == id) return e;
      }
      std::this_thread::sleep_for(kStep);
    }
    return std::nullopt;
  }

  // Waits until the log contains `text`.
  bool WaitForLog(const std::string& name, const std::string& text) {
    const auto give_up = std::chrono::steady_clock::now() + kMaxWait;
    while (std::chrono::steady_clock::now() < give_up) {
      if (ReadLog(name, "out").find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(kStep);
    }
    return false;
  }

  std::string dir_;
};

// Gone or a zombie waiting for its (new) parent: either way not running.
bool ProcessGone(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return true;
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

bool WaitGone(pid_t pid) {
  const auto give_up = std::chrono::steady_clock::now() + kMaxWait;
  while (std::chrono::steady_clock::now() < give_up) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(kStep);
  }
  return false;
}

TEST_F(LauncherTest, CapturesOutputAndReportsExitCode) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id = launcher.Start(
      Spec("r-0", {"/bin/sh", "-c", "echo hi; echo oops >&2; exit 3"}));
  ASSERT_TRUE(id.ok()) << id.status();
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->name, "r-0");
  EXPECT_FALSE(e->signaled);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_FALSE(e->stop_requested);
  EXPECT_EQ(ReadLog("r-0", "out"), "hi\n");
  EXPECT_EQ(ReadLog("r-0", "err"), "oops\n");
  EXPECT_EQ(launcher.size(), 0);
  EXPECT_FALSE(launcher.IsAlive(*id));

  // A restart appends to the same logs.
  id = launcher.Start(Spec("r-0", {"/bin/sh", "-c", "echo again"}));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForExit(launcher, *id).has_value());
  EXPECT_EQ(ReadLog("r-0", "out"), "hi\nagain\n");
}

TEST_F(LauncherTest, ResolvesProgramInPath) {
  LocalLauncher launcher;
  ProcessSpec spec = Spec("path", {"sh", "-c", "exit 7"});
  spec.env["PATH"] = "/nonexistent:/usr/bin:/bin";
  absl::StatusOr<ProcessId> id = launcher.Start(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 7);
}

TEST_F(LauncherTest, MissingExecutableIsNamed) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id =
      launcher.Start(Spec("missing", {"gpusched-no-such-engine", "--port"}));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(id.status().message(), HasSubstr("gpusched-no-such-engine"));
  EXPECT_THAT(id.status().message(), HasSubstr("PATH"));

  id = launcher.Start(Spec("missing", {"/nonexistent/bin/vllm"}));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(id.status().message(), HasSubstr("/nonexistent/bin/vllm"));

  // A directory is not a program.
  id = launcher.Start(Spec("missing", {dir_}));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(launcher.size(), 0);
}

// A program the kernel cannot run (no shebang, no ELF header): the exec
// failure comes back from the child as a Start error naming it.
TEST_F(LauncherTest, ExecFailureIsReported) {
  const std::string path = dir_ + "/not-a-program";
  { std::ofstream(path) << "\x01\x02 not a program\n"; }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id = launcher.Start(Spec("bad", {path}));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr(path));
  EXPECT_THAT(id.status().message(), HasSubstr("Exec format error"));
  EXPECT_EQ(launcher.size(), 0);
}

// gpusched killed outright (SIGKILL, no destructor runs): its engines die
// with it (the parent-death signal) instead of living on as orphans.
TEST_F(LauncherTest, EnginesDieWithAKilledParent) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    close(pipefd[0]);
    LocalLauncher launcher;
    absl::StatusOr<ProcessId> id =
        launcher.Start(Spec("orphan", {"sleep", "300"}));
    const int64_t pid = id.ok() ? *id : -1;
    ssize_t n = write(pipefd[1], &pid, sizeof pid);
    (void)n;
    raise(SIGKILL);  // as `kill -9` would
    _exit(1);
  }
  close(pipefd[1]);
  int64_t engine = -1;
  ASSERT_EQ(read(pipefd[0], &engine, sizeof engine),
            static_cast<ssize_t>(sizeof engine));
  close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(parent, &status, 0), parent);
  ASSERT_GT(engine, 0);
  // Generous: the kernel delivers the signal at the parent's exit; a
  // loaded machine may take a while to run the child to its end.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ProcessGone(static_cast<pid_t>(engine)) &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(kStep);
  }
  const bool gone = ProcessGone(static_cast<pid_t>(engine));
  if (!gone) kill(static_cast<pid_t>(engine), SIGKILL);  // leave nothing
  EXPECT_TRUE(gone) << "engine " << engine << " outlived its killed parent";
}

TEST_F(LauncherTest, RejectsBadSpecs) {
  LocalLauncher launcher;
  EXPECT_EQ(launcher.Start(Spec("a/b", {"/bin/true"})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher.Start(Spec("", {"/bin/true"})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher.Start(Spec("empty", {})).status().code(),
            absl::StatusCode::kInvalidArgument);
  ProcessSpec spec = Spec("cwd", {"/bin/true"});
  spec.cwd = dir_ + "/no-such-dir";
  absl::StatusOr<ProcessId> id = launcher.Start(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("no-such-dir"));
}

TEST_F(LauncherTest, PassesEnvironment) {
  LocalLauncher launcher;
  ProcessSpec spec = Spec("env", {"/usr/bin/env"});
  spec.inherit_env = false;
  spec.env = {{"CUDA_VISIBLE_DEVICES", "MIG-abc"}, {"GPUSCHED_X", "1"}};
  absl::StatusOr<ProcessId> id = launcher.Start(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForExit(launcher, *id).has_value());
  EXPECT_EQ(ReadLog("env", "out"),
            "CUDA_VISIBLE_DEVICES=MIG-abc\nGPUSCHED_X=1\n");
}

TEST_F(LauncherTest, InheritsEnvironmentWithOverrides) {
  ASSERT_EQ(setenv("GPUSCHED_LAUNCHER_TEST_A", "parent", 1), 0);
  ASSERT_EQ(setenv("GPUSCHED_LAUNCHER_TEST_B", "parent", 1), 0);
  LocalLauncher launcher;
  ProcessSpec spec = Spec("inherit", {"/usr/bin/env"});
  spec.env = {{"GPUSCHED_LAUNCHER_TEST_B", "child"}};
  absl::StatusOr<ProcessId> id = launcher.Start(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForExit(launcher, *id).has_value());
  const std::string out = ReadLog("inherit", "out");
  EXPECT_THAT(out, HasSubstr("GPUSCHED_LAUNCHER_TEST_A=parent\n"));
  EXPECT_THAT(out, HasSubstr("GPUSCHED_LAUNCHER_TEST_B=child\n"));
  EXPECT_THAT(out, Not(HasSubstr("GPUSCHED_LAUNCHER_TEST_B=parent")));
  unsetenv("GPUSCHED_LAUNCHER_TEST_A");
  unsetenv("GPUSCHED_LAUNCHER_TEST_B");
}

TEST_F(LauncherTest, RunsInWorkingDirectoryAndOwnGroup) {
  LocalLauncher launcher;
  ProcessSpec spec = Spec("cwd", {"/bin/sh", "-c", "pwd; echo $$"});
  spec.cwd = dir_;
  absl::StatusOr<ProcessId> id = launcher.Start(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(getpgid(static_cast<pid_t>(*id)), static_cast<pid_t>(*id));
  ASSERT_TRUE(WaitForExit(launcher, *id).has_value());
  EXPECT_EQ(
      ReadLog("cwd", "out"),
      absl::StrCat(std::filesystem::canonical(dir_).string(), "\n", *id, "\n"));
}

TEST_F(LauncherTest, StopSendsTerm) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id =
      launcher.Start(Spec("sleep", {"/bin/sleep", "30"}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(launcher.IsAlive(*id));
  EXPECT_THAT(launcher.Poll(), IsEmpty());
  ASSERT_TRUE(launcher.Stop(*id, 10 * kMicrosPerSecond, 0).ok());
  EXPECT_EQ(launcher.Tick(0), 10 * kMicrosPerSecond);
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->signaled);
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_TRUE(e->stop_requested);
  EXPECT_EQ(launcher.Tick(20 * kMicrosPerSecond), kNever);
  EXPECT_EQ(launcher.Stop(*id, kMicrosPerSecond, 0).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LauncherTest, KillsAfterGraceWhenTermIsIgnored) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id = launcher.Start(Spec(
      "stubborn", {"/bin/sh", "-c", "trap \"\" TERM; echo ready; sleep 30"}));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForLog("stubborn", "ready"));

  const Micros t0 = 100 * kMicrosPerSecond;
  ASSERT_TRUE(launcher.Stop(*id, 5 * kMicrosPerSecond, t0).ok());
  // Stopping again never postpones the deadline.
  ASSERT_TRUE(launcher.Stop(*id, 50 * kMicrosPerSecond, t0 + 1).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_THAT(launcher.Poll(), IsEmpty());
  EXPECT_TRUE(launcher.IsAlive(*id));
  EXPECT_EQ(launcher.Tick(t0 + 4 * kMicrosPerSecond),
            t0 + 5 * kMicrosPerSecond);
  EXPECT_TRUE(launcher.IsAlive(*id));

  EXPECT_EQ(launcher.Tick(t0 + 5 * kMicrosPerSecond), kNever);
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->signaled);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(e->stop_requested);
}

TEST_F(LauncherTest, KillStopsAtOnce) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id =
      launcher.Start(Spec("sleep", {"/bin/sleep", "30"}));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(launcher.Kill(*id).ok());
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(e->stop_requested);
  EXPECT_EQ(launcher.Kill(*id).code(), absl::StatusCode::kNotFound);
}

TEST_F(LauncherTest, LeaderExitKillsLeftoverWorkers) {
  LocalLauncher launcher;
  absl::StatusOr<ProcessId> id = launcher.Start(
      Spec("leader", {"/bin/sh", "-c", "/bin/sleep 30 & echo $!; exit 0"}));
  ASSERT_TRUE(id.ok()) << id.status();
  std::optional<ExitEvent> e = WaitForExit(launcher, *id);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  int64_t worker = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripTrailingAsciiWhitespace(ReadLog("leader", "out")), &worker));
  EXPECT_TRUE(WaitGone(static_cast<pid_t>(worker)));
}

TEST_F(LauncherTest, DestructorKillsAndReapsEverything) {
  std::vector<pid_t> pids;
  pid_t worker = 0;
  {
    LocalLauncher launcher;
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<ProcessId> id =
          launcher.Start(Spec(absl::StrCat("r-", i), {"/bin/sleep", "30"}));
      ASSERT_TRUE(id.ok()) << id.status();
      pids.push_back(static_cast<pid_t>(*id));
    }
    absl::StatusOr<ProcessId> id = launcher.Start(
        Spec("tree", {"/bin/sh", "-c", "/bin/sleep 30 & echo $!; wait"}));
    ASSERT_TRUE(id.ok()) << id.status();
    pids.push_back(static_cast<pid_t>(*id));
    ASSERT_TRUE(WaitForLog("tree", "\n"));
    int64_t w = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        absl::StripTrailingAsciiWhitespace(ReadLog("tree", "out")), &w));
    worker = static_cast<pid_t>(w);
  }
  for (pid_t pid : pids) {
    // Reaped: no longer our child, so no zombie is left behind.
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, WNOHANG), -1) << pid;
    EXPECT_EQ(errno, ECHILD);
    EXPECT_TRUE(ProcessGone(pid)) << pid;
  }
  EXPECT_TRUE(WaitGone(worker));
}

}  // namespace
}  // namespace gpusched::backends
