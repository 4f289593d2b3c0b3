#include "placement/priority.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

namespace gpusched::placement {

std::vector<PriorityClass> BuiltinPriorityClasses() {
  return {
      {"system", 2000, false,
       "platform components the cluster cannot run without; never preempted"},
      {"critical", 1000, true,
       "production serving that must stay up; preempted only by system pods "
       "or when over its tenant's quota"},
      {"standard", 500, true, "ordinary serving; the default class"},
      {"batch", 100, true, "offline and batch inference, evaluations"},
      {"sheddable", 0, true, "best effort; the first to be preempted"},
  };
}

PriorityClasses PriorityClasses::Defaults() {
  absl::StatusOr<PriorityClasses> p = Create(BuiltinPriorityClasses());
  CHECK(p.ok()) << p.status().message();
  return *std::move(p);
}

absl::StatusOr<PriorityClasses> PriorityClasses::Create(
    std::vector<PriorityClass> classes, std::string default_class) {
  std::vector<std::string> problems;
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < classes.size(); ++i) {
    const PriorityClass& c = classes[i];
    if (c.name.empty()) {
      problems.push_back(
          absl::StrCat("priority class #", i + 1, " has no name"));
    } else if (!names.insert(c.name).second) {
      problems.push_back(
          absl::StrCat("priority class '", c.name, "' is declared twice"));
    }
  }
  if (!names.contains(default_class)) {
    problems.push_back(absl::StrCat("default priority class '", default_class,
                                    "' is not declared"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid priority classes (", problems.size(),
                     problems.size() == 1 ? " problem): " : " problems): ",
                     absl::StrJoin(problems, "; ")));
  }
  std::stable_sort(classes.begin(), classes.end(),
                   [](const PriorityClass& a, const PriorityClass& b) {
                     return a.value > b.value;
                   });
  PriorityClasses p;
  p.classes_ = std::move(classes);
  p.default_ = std::move(default_class);
  return p;
}

absl::StatusOr<PriorityClass> PriorityClasses::Find(
    absl::string_view name) const {
  if (name.empty()) name = default_;
  for (const PriorityClass& c : classes_) {
    if (c.name == name) return c;
  }
  std::vector<std::string> known;
  for (const PriorityClass& c : classes_) known.push_back(c.name);
  return absl::NotFoundError(
      absl::StrCat("unknown priority class '", name,
                   "'; known: ", absl::StrJoin(known, ", ")));
}

absl::StatusOr<inventory::PodInfo> PriorityClasses::MakePodInfo(
    std::string tenant, absl::string_view class_name) const {
  absl::StatusOr<PriorityClass> c = Find(class_name);
  if (!c.ok()) return c.status();
  inventory::PodInfo info;
  info.tenant = std::move(tenant);
  info.priority = c->value;
  info.preemptible = c->preemptible;
  return info;
}

const PriorityClass& PriorityClasses::default_class() const {
  for (const PriorityClass& c : classes_) {
    if (c.name == default_) return c;
  }
  CHECK(false) << "default priority class '" << default_ << "' vanished";
  return classes_.front();
}

}  // namespace gpusched::placement
