// Priority classes: named priorities that pods run under, in Kubernetes
// PriorityClass vocabulary (a name, a numeric value, and whether pods of the
// class may be preempted).
//
// A higher value wins: preemption only evicts pods of strictly lower value
// (or over-quota pods reclaimed by an under-quota tenant, see preemption.h)
// and never a pod whose class is not preemptible. The built-in classes, used
// when a deployment configures none:
//
//   name       value  preemptible  meant for
//   system      2000  no           platform components the cluster needs
//   critical    1000  yes          production serving that must stay up
//   standard     500  yes          ordinary serving (the default class)
//   batch        100  yes          offline and batch inference, evaluations
//   sheddable      0  yes          best effort; the first to go
//
// A pod that names no class runs as `standard`. Immutable after Create;
// thread-safe for concurrent reads.
#ifndef GPUSCHED_PLACEMENT_PRIORITY_H_
#define GPUSCHED_PLACEMENT_PRIORITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inventory/cluster_state.h"

namespace gpusched::placement {

struct PriorityClass {
  std::string name;
  // Higher runs first and may preempt lower. Any int; equal values are
  // allowed (such classes never preempt one another).
  int value = 0;
  // False: pods of this class are never evicted by preemption.
  bool preemptible = true;
  std::string description;
};

// The name of the class a pod gets when it names none.
inline constexpr char kDefaultPriorityClass[] = "standard";

// system, critical, standard, batch, sheddable (see the file comment).
std::vector<PriorityClass> BuiltinPriorityClasses();

class PriorityClasses {
 public:
  // The built-in classes with `standard` as the default.
  static PriorityClasses Defaults();
  // Validates `classes` (names non-empty and unique, the default class among
  // them); the error lists every problem.
  static absl::StatusOr<PriorityClasses> Create(
      std::vector<PriorityClass> classes,
      std::string default_class = kDefaultPriorityClass);

  // The class called `name`; an empty name means the default class.
  // NotFound names the known classes.
  absl::StatusOr<PriorityClass> Find(absl::string_view name) const;
  // The scheduling metadata of a pod of `tenant` running under `class_name`.
  absl::StatusOr<inventory::PodInfo> MakePodInfo(
      std::string tenant, absl::string_view class_name) const;

  const PriorityClass& default_class() const;
  // Highest value first; equal values keep their configured order.
  const std::vector<PriorityClass>& classes() const { return classes_; }

 private:
  PriorityClasses() = default;
  std::vector<PriorityClass> classes_;
  std::string default_;
};

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_PRIORITY_H_
