// LocalLauncher: replicas as processes on this machine (backends/launcher.h).
#ifndef GPUSCHED_BACKENDS_LOCAL_LOCAL_LAUNCHER_H_
#define GPUSCHED_BACKENDS_LOCAL_LOCAL_LAUNCHER_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "backends/launcher.h"

namespace gpusched::backends {

// Local processes (fork + execve, never a shell): own process group,
// signals reset to default and unblocked, stdin from /dev/null,
// stdout/stderr appended to per-replica log files, and a parent-death
// signal (SIGKILL), so an engine does not outlive a gpusched killed outright
// (`kill -9`). The signal follows the thread that called Start: call it from
// a thread that lives as long as its processes (the controller's loop). When a
// process exits, whatever is left of its group (an engine's worker processes)
// is killed before it is reaped, so no orphan keeps holding a GPU. Poll() reaps
// only this launcher's children; the daemon must not set SIGCHLD to SIG_IGN.
// The destructor kills every remaining group and reaps it: no zombies, no
// orphans.
class LocalLauncher : public Launcher {
 public:
  LocalLauncher() = default;
  LocalLauncher(const LocalLauncher&) = delete;
  LocalLauncher& operator=(const LocalLauncher&) = delete;
  ~LocalLauncher() override;

  absl::StatusOr<ProcessId> Start(const ProcessSpec& spec) override;
  std::vector<ExitEvent> Poll() override;
  absl::Status Stop(ProcessId id, Micros grace, Micros now) override;
  absl::Status Kill(ProcessId id) override;
  Micros Tick(Micros now) override;
  bool IsAlive(ProcessId id) const override;

  int size() const override { return static_cast<int>(children_.size()); }

 private:
  struct Child {
    std::string name;
    bool stop_requested = false;
    bool killed = false;
    Micros kill_deadline = kNever;
  };

  absl::flat_hash_map<ProcessId, Child> children_;
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_LOCAL_LOCAL_LAUNCHER_H_
