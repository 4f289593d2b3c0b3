// RunCommand: runs a program to completion (fork + execvp, never a shell),
// feeds it `input` on stdin and collects what it prints, within a timeout
// after which its process group is killed. For the short commands a cluster
// manager is driven with (sbatch, scontrol, scancel). Thread-safe: each call
// owns its child, which it reaps by pid.
#ifndef GPUSCHED_BACKENDS_COMMAND_H_
#define GPUSCHED_BACKENDS_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"

namespace gpusched::backends {

struct CommandResult {
  int exit_code = 0;  // -N when killed by signal N
  std::string out;
  std::string err;
};

// Output beyond `max_output` bytes (per stream) is an error: nothing outside
// is read without a bound.
inline constexpr size_t kMaxCommandOutput = 64 << 20;

// Unavailable when the program cannot be started; DeadlineExceeded when it
// ran past `timeout` (it is killed); ResourceExhausted past `max_output`.
// A non-zero exit is a result, not an error.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         Micros timeout,
                                         size_t max_output = kMaxCommandOutput);

// Exit 0 gives stdout; anything else an error naming the command, its exit
// and the first line of its stderr (Unavailable, so callers retry).
absl::StatusOr<std::string> RunCommandOk(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         Micros timeout);

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_COMMAND_H_
