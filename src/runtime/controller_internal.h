// Helpers the Controller's files share (controller.cc, controller_views.cc);
// not for use outside api/.
#ifndef GPUSCHED_RUNTIME_CONTROLLER_INTERNAL_H_
#define GPUSCHED_RUNTIME_CONTROLLER_INTERNAL_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "config/manifest.h"
#include "inventory/resources.h"
#include "nlohmann/json.hpp"
#include "runtime/controller.h"

namespace gpusched::runtime {

// The last `lines` lines of the file at `path` ("" when unreadable).
std::string TailLines(const std::string& path, int lines);

// A deployment's resources as the placement layer asks for them.
inventory::ResourceRequest ToRequest(const config::ResourceSpec& r);
// What a replica is launched from: a change means new replicas.
std::string TemplateKey(const config::DeploymentSpec& s);
// How applying `canonical` over the stored object (null: none) goes: fills
// `result` and returns the new generation, or 0 when nothing changes.
int64_t PlanApply(const char* kind, const std::string& name,
                  const nlohmann::json& canonical, const nlohmann::json* stored,
                  int64_t stored_generation, ApplyResult* result);
// The leaf queue of a deployment's owner ("-" for none).
std::string QueueOf(const std::string& tenant);

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_CONTROLLER_INTERNAL_H_
