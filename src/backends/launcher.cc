#include "backends/launcher.h"

namespace gpusched::backends {

const char* PoolNodeStateName(PoolNodeState s) {
  switch (s) {
    case PoolNodeState::kPoweredDown:
      return "powered_down";
    case PoolNodeState::kPoweringUp:
      return "powering_up";
    case PoolNodeState::kUp:
      return "up";
    case PoolNodeState::kPoweringDown:
      return "powering_down";
    case PoolNodeState::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace gpusched::backends
