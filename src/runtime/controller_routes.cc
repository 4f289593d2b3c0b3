// The Controller's ModelRoutes (config/model_route.h): applying and
// deleting them, the weights the gateway splits by, and their canary
// rollouts (control::Rollout), evaluated every pass on the gateway's
// samples. docs/versions.md.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

void Controller::CheckRoute(const config::ModelRouteSpec& r,
                            const std::vector<config::Manifest>& batch,
                            std::vector<std::string>* problems) {
  const std::string where = absl::StrCat("ModelRoute/", r.name);
  auto in_batch = [&](config::Manifest::Kind kind, const std::string& name) {
    return std::any_of(batch.begin(), batch.end(),
                       [&](const config::Manifest& m) {
                         return m.kind == kind && m.name() == name;
                       });
  };
  if ((deployments_.contains(r.name) && !deployments_.at(r.name).deleting) ||
      in_batch(config::Manifest::Kind::kDeployment, r.name)) {
    problems->push_back(absl::StrCat(
        where,
        ": metadata.name: a Deployment has this name; a public name "
        "must differ from its versions' deployments"));
  }
  for (size_t i = 0; i < r.targets.size(); ++i) {
    const std::string& dep = r.targets[i].deployment;
    const bool known =
        (deployments_.contains(dep) && !deployments_.at(dep).deleting) ||
        in_batch(config::Manifest::Kind::kDeployment, dep);
    if (known) continue;
    const bool route = routes_.contains(dep) ||
                       in_batch(config::Manifest::Kind::kModelRoute, dep);
    problems->push_back(absl::StrCat(
        where, ": spec.targets[", i, "].deployment: ",
        route ? absl::StrCat("'", dep,
                             "' is a ModelRoute; routes target deployments "
                             "only (no chains, no cycles)")
              : absl::StrCat("unknown deployment '", dep, "'")));
  }
}

// (CheckRoute's tail: the shadow deployment.)
void Controller::CheckShadow(const config::ModelRouteSpec& r,
                             const std::vector<config::Manifest>& batch,
                             std::vector<std::string>* problems) {
  if (!r.shadow) return;
  const std::string& dep = r.shadow->deployment;
  const bool known =
      (deployments_.contains(dep) && !deployments_.at(dep).deleting) ||
      std::any_of(batch.begin(), batch.end(), [&](const config::Manifest& m) {
        return m.kind == config::Manifest::Kind::kDeployment && m.name() == dep;
      });
  if (!known) {
    problems->push_back(absl::StrCat("ModelRoute/", r.name,
                                     ": spec.shadow.deployment: unknown "
                                     "deployment '",
                                     dep, "'"));
  }
}

std::vector<int> Controller::Weights(const Route& r) const {
  return r.spec.RolloutWeights(r.rollout ? r.rollout->canary_weight() : 0);
}

void Controller::SyncParking(const std::string& name, Route& r) {
  // Held at 0 replicas: the stable once the canary is promoted (with
  // scaleDownStable), and the baseline once the rollout has ended.
  std::map<std::string, std::string> park;  // deployment -> why
  if (r.rollout && r.rollout->phase() == control::RolloutPhase::kPromoted &&
      r.spec.rollout->scale_down_stable) {
    park[r.spec.Stable()] =
        absl::StrCat("route ", name, " promoted its canary ",
                     r.spec.rollout->canary, " (spec.rollout.scaleDownStable)");
  }
  if (r.rollout && r.rollout->done() && !r.spec.rollout->baseline.empty()) {
    park[r.spec.rollout->baseline] = absl::StrCat(
        "route ", name, "'s rollout ended; it was the rollout's baseline");
  }
  for (auto& [dname, d] : deployments_) {
    if (d.parked_by == name && !park.contains(dname)) {
      d.parked_by.clear();
      Event("deployment.unparked", dname,
            absl::StrCat("deployment ", dname, " runs its replicas again (",
                         "route ", name, " no longer holds it at 0)"));
      dirty_ = true;
    }
  }
  for (const auto& [dname, why] : park) {
    auto it = deployments_.find(dname);
    if (it == deployments_.end() || it->second.parked_by == name) continue;
    it->second.parked_by = name;
    Event("deployment.parked", dname,
          absl::StrCat("deployment ", dname, " drains to 0 replicas: ", why),
          json{{"route", name}});
    dirty_ = true;
  }
}

absl::Status Controller::PushRoute(const std::string& name, Route& r) {
  const std::vector<int> w = Weights(r);
  if (w == r.weights) return absl::OkStatus();
  RETURN_IF_ERROR(gateway_->ServeRoute(r.spec, w));
  r.weights = w;
  return absl::OkStatus();
}

absl::Status Controller::ApplyRoute(const config::ModelRouteSpec& spec,
                                    ApplyResult* result, bool persist,
                                    const json* state) {
  config::Manifest m;
  m.kind = config::Manifest::Kind::kModelRoute;
  m.route = spec;
  const json canonical = config::ToJson(m);
  auto it = routes_.find(spec.name);
  const bool exists = it != routes_.end();
  const int64_t generation =
      PlanApply("ModelRoute", spec.name, canonical,
                exists ? &it->second.manifest : nullptr,
                exists ? it->second.generation : 0, result);
  if (generation == 0) return absl::OkStatus();
  const Micros wall = Wall();
  Route next;
  next.spec = spec;
  next.manifest = canonical;
  next.generation = generation;
  next.created = exists ? it->second.created : wall;
  next.updated = wall;
  // The same rollout over the same targets goes on; a changed one starts
  // over from its first step.
  const bool same_rollout = exists && it->second.rollout && spec.rollout &&
                            it->second.spec.rollout == spec.rollout &&
                            it->second.spec.targets == spec.targets;
  bool started = false;
  if (same_rollout) {
    next.rollout = it->second.rollout;
  } else if (spec.rollout && state != nullptr) {
    auto restored = control::Rollout::Restore(*spec.rollout, *state, Now());
    if (restored.ok()) {
      next.rollout = *std::move(restored);
    } else {
      std::fprintf(stderr, "gpusched: route %s: %s; its rollout starts over\n",
                   spec.name.c_str(),
                   std::string(restored.status().message()).c_str());
      next.rollout.emplace(*spec.rollout, Now());
      started = true;
    }
  } else if (spec.rollout) {
    next.rollout.emplace(*spec.rollout, Now());
    started = true;
  }
  if (exists) next.weights = it->second.weights;
  // Validate in the gateway before anything is stored.
  RETURN_IF_ERROR(gateway_->ServeRoute(next.spec, Weights(next)));
  next.weights = Weights(next);
  if (persist) {
    RETURN_IF_ERROR(
        store_->PutRoute(spec.name, canonical.dump(), generation, wall));
  }
  Route& r = routes_[spec.name] = std::move(next);
  if (persist && r.rollout) {
    RETURN_IF_ERROR(
        store_->PutRouteState(spec.name, r.rollout->State().dump(), wall));
  }
  SyncParking(spec.name, r);
  std::vector<std::string> split;
  for (size_t i = 0; i < r.spec.targets.size(); ++i) {
    split.push_back(
        absl::StrCat(r.spec.targets[i].version, "=", r.weights[i], "%"));
  }
  if (persist) {
    Event(
        exists ? "route.configured" : "route.created", spec.name,
        absl::StrCat("route ", spec.name, " ", result->action, " (generation ",
                     generation, "): ", absl::StrJoin(split, ", ")),
        json{{"weights", RouteWeightsJson(r)}});
  }
  if (persist && started) {
    const std::string& baseline = spec.rollout->baseline;
    json details{{"canary", spec.rollout->canary},
                 {"stable", spec.Stable()},
                 {"weights", RouteWeightsJson(r)}};
    if (!baseline.empty()) details["baseline"] = baseline;  // as NoteRollout
    Event("rollout.started", spec.name,
          absl::StrCat("rollout of ", spec.rollout->canary, " on route ",
                       spec.name, " started at ", r.rollout->canary_weight(),
                       "% (step 1 of ", r.rollout->spec().steps.size(),
                       "; stable ", spec.Stable(),
                       baseline.empty() ? std::string()
                                        : absl::StrCat("; baseline ", baseline),
                       ")"),
          std::move(details));
  }
  dirty_ = true;
  return absl::OkStatus();
}

json Controller::RouteWeightsJson(const Route& r) const {
  json w = json::array();
  for (size_t i = 0; i < r.spec.targets.size(); ++i) {
    w.push_back({{"deployment", r.spec.targets[i].deployment},
                 {"version", r.spec.targets[i].version},
                 {"weight", i < r.weights.size() ? r.weights[i] : 0}});
  }
  return w;
}

absl::Status Controller::DeleteRoute(const std::string& name, bool persist) {
  auto it = routes_.find(name);
  if (it == routes_.end()) {
    return absl::NotFoundError(absl::StrCat("route '", name, "' not found"));
  }
  if (persist) RETURN_IF_ERROR(store_->DeleteRoute(name));
  gateway_->RemoveRoute(name);
  Route gone = std::move(it->second);
  routes_.erase(it);
  gone.rollout.reset();
  SyncParking(name, gone);
  if (persist) {
    Event("route.deleted", name,
          absl::StrCat("route ", name,
                       " deleted: requests for the name get 404; its "
                       "deployments stay"));
  }
  return absl::OkStatus();
}

std::string Controller::RouteOf(const std::string& deployment) const {
  for (const auto& [name, r] : routes_) {
    if (r.spec.shadow && r.spec.shadow->deployment == deployment) return name;
    for (const config::RouteTargetSpec& t : r.spec.targets) {
      if (t.deployment == deployment) return name;
    }
  }
  return "";
}

void Controller::NoteRollout(const std::string& name, Route& r,
                             const control::RolloutChange& c) {
  if (absl::Status st = PushRoute(name, r); !st.ok()) {
    std::fprintf(stderr, "gpusched: route %s: %s\n", name.c_str(),
                 std::string(st.message()).c_str());
  }
  json details = c.details;
  details["route"] = name;
  details["canary"] = r.spec.rollout->canary;
  details["stable"] = r.spec.Stable();
  if (!r.spec.rollout->baseline.empty()) {
    details["baseline"] = r.spec.rollout->baseline;
  }
  details["weights"] = RouteWeightsJson(r);
  Event(c.kind, name, absl::StrCat("route ", name, ": ", c.message),
        std::move(details));
  if (absl::Status st = store_->PutRouteState(name, r.rollout->State().dump(),
                                              Wall(), FenceLocked());
      !st.ok()) {
    std::fprintf(stderr, "gpusched: route %s: state not stored: %s\n",
                 name.c_str(), std::string(st.message()).c_str());
  }
  SyncParking(name, r);
}

void Controller::ProgressRollouts(Micros now) {
  for (auto& [name, r] : routes_) {
    if (!r.rollout || r.rollout->done()) continue;
    const std::string canary = r.spec.rollout->canary;
    const std::string stable = r.spec.Stable();
    const Micros since = r.rollout->WindowStart(now);
    double slo_s = 0;
    if (auto d = deployments_.find(canary); d != deployments_.end()) {
      slo_s = d->second.spec.ttft_slo_ms / 1000.0;
    }
    // The canary is compared with the baseline where the route has one.
    const std::string& reference =
        r.spec.rollout->baseline.empty() ? stable : r.spec.rollout->baseline;
    const control::VersionWindow ws =
        control::Collect(gateway_->SamplesSince(reference, since), slo_s);
    const control::VersionWindow wc =
        control::Collect(gateway_->SamplesSince(canary, since), slo_s);
    for (const control::RolloutChange& c : r.rollout->Step(now, ws, wc)) {
      NoteRollout(name, r, c);
    }
    // Woken for the step's end; the analysis runs every pass anyway.
    next_wake_ = std::min(next_wake_, r.rollout->NextDeadline());
  }
}

absl::StatusOr<json> Controller::RolloutAction(const std::string& name,
                                               const std::string& action,
                                               const std::string& why) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(name);
  if (it == routes_.end()) {
    return absl::NotFoundError(absl::StrCat("route '", name, "' not found"));
  }
  Route& r = it->second;
  if (!r.rollout) {
    return absl::FailedPreconditionError(
        absl::StrCat("route '", name, "' has no rollout (spec.rollout)"));
  }
  const Micros now = Now();
  absl::StatusOr<control::RolloutChange> c;
  if (action == "promote") {
    c = r.rollout->Promote(now, false);
  } else if (action == "promote-full") {
    c = r.rollout->Promote(now, true);
  } else if (action == "pause") {
    c = r.rollout->Pause(now);
  } else if (action == "resume") {
    c = r.rollout->Resume(now);
  } else if (action == "abort") {
    c = r.rollout->Abort(now, why);
  } else if (action == "retry") {
    c = r.rollout->Retry(now);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown rollout action '", action,
        "'; known: promote, promote-full, pause, resume, abort, retry"));
  }
  if (!c.ok()) {
    const control::RolloutPhase phase = r.rollout->phase();
    const bool retryable = phase == control::RolloutPhase::kRolledBack ||
                           phase == control::RolloutPhase::kAborted;
    return absl::FailedPreconditionError(
        absl::StrCat("route '", name, "': ", c.status().message(),
                     retryable && action != "retry"
                         ? absl::StrCat("; `gpusched rollout retry ", name,
                                        "` starts it again from its first step")
                         : ""));
  }
  // Every action keeps its reason: in the event and in the route's status.
  if (!why.empty()) {
    c->details["reason"] = why;
    if (action != "abort") {  // an abort's message already holds it
      absl::StrAppend(&c->message, " (reason: ", why, ")");
    }
    r.rollout->set_reason(why);
  }
  NoteRollout(name, r, *c);
  dirty_ = true;
  return RouteJson(name, r);
}

json Controller::RouteJson(const std::string& name, const Route& r) const {
  json j = {{"name", name},
            {"generation", r.generation},
            {"created", r.created},
            {"updated", r.updated},
            {"sticky", r.spec.sticky},
            {"targets", RouteWeightsJson(r)},
            {"manifest", r.manifest}};
  if (r.rollout) {
    const control::Rollout& ro = *r.rollout;
    json steps = json::array();
    for (const config::RolloutStepSpec& s : ro.spec().steps) {
      steps.push_back(s.weight);
    }
    const Micros deadline = ro.NextDeadline();
    j["rollout"] = {
        {"canary", r.spec.rollout->canary},
        {"stable", r.spec.Stable()},
        {"baseline", r.spec.rollout->baseline.empty()
                         ? json(nullptr)
                         : json(r.spec.rollout->baseline)},
        {"phase", control::RolloutPhaseName(ro.phase())},
        {"step", ro.step() + 1},
        {"steps", steps},
        {"canaryWeight", ro.canary_weight()},
        {"reason", ro.reason()},
        {"stepSeconds", ToSeconds(Now() - ro.step_started())},
        {"nextStepInSeconds",
         deadline == kNever ? json(nullptr)
                            : json(std::max(0.0, ToSeconds(deadline - Now())))},
        // A manual step waits for `promote` (no analysis moves it on).
        {"manualStep",
         ro.phase() == control::RolloutPhase::kProgressing &&
             ro.step() < static_cast<int>(ro.spec().steps.size()) &&
             ro.spec().steps[ro.step()].manual},
        {"analysis", ro.last_analysis().Json()},
    };
  }
  return j;
}

json Controller::RoutesJson(const std::string& only) {
  json items = json::array();
  bool follower = false;
  {
    absl::MutexLock lock(&mu_);
    follower = !leading_;
    for (const auto& [name, r] : routes_) {
      if (!only.empty() && name != only) continue;
      items.push_back(RouteJson(name, r));
    }
  }
  // A follower's rollouts do not move: the leader's, as published, unless
  // it has not seen this generation yet.
  for (json& item : items) {
    if (!follower) break;
    std::optional<json> p =
        Published(absl::StrCat("routes/", item["name"].get<std::string>()));
    if (p && p->value("generation", int64_t{-1}) ==
                 item.value("generation", int64_t{0})) {
      item = *std::move(p);
    }
  }
  return items;
}

absl::Status Controller::RestoreRoutes() {
  std::vector<store::Document> docs;
  ASSIGN_OR_RETURN(docs, store_->ListRoutes());
  for (const store::Document& doc : docs) {
    json j = json::parse(doc.manifest_json, nullptr, false);
    auto m =
        config::ManifestFromJson(j, absl::StrCat("stored route ", doc.name));
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat("restoring route '", doc.name,
                                       "': ", m.status().message()));
    }
    json state;
    if (auto s = store_->GetRouteState(doc.name); s.ok()) {
      state = json::parse(*s, nullptr, false);
    }
    ApplyResult result;
    RETURN_IF_ERROR(ApplyRoute(m->route, &result, /*persist=*/false,
                               state.is_object() ? &state : nullptr));
    Route& r = routes_[doc.name];
    r.generation = doc.generation;
    r.created = doc.created;
    r.updated = doc.updated;
  }
  return absl::OkStatus();
}

}  // namespace gpusched::runtime
