#include "inventory/resources.h"

namespace gpusched::inventory {

const char* GpuKindName(GpuKind kind) {
  switch (kind) {
    case GpuKind::kNone:
      return "none";
    case GpuKind::kWhole:
      return "whole";
    case GpuKind::kFraction:
      return "fraction";
    case GpuKind::kMig:
      return "mig";
  }
  return "unknown";
}

const char* TopologyName(Topology t) {
  switch (t) {
    case Topology::kAny:
      return "any";
    case Topology::kPreferred:
      return "nvlink-preferred";
    case Topology::kRequired:
      return "nvlink-required";
  }
  return "unknown";
}

int64_t Allocation::GpuMilli() const {
  int64_t total = 0;
  for (const GpuShare& s : gpus) total += s.milli;
  return total;
}

}  // namespace gpusched::inventory
