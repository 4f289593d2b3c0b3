#include "control/lifecycle.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpusched::control {

using nlohmann::json;

const char* ReplicaStateName(ReplicaState s) {
  switch (s) {
    case ReplicaState::kPending:
      return "pending";
    case ReplicaState::kStarting:
      return "starting";
    case ReplicaState::kReady:
      return "ready";
    case ReplicaState::kUnhealthy:
      return "unhealthy";
    case ReplicaState::kBackoff:
      return "backoff";
    case ReplicaState::kDraining:
      return "draining";
  }
  return "?";
}

const char* ActionName(LifecycleAction::Kind k) {
  switch (k) {
    case LifecycleAction::Kind::kLaunch:
      return "launch";
    case LifecycleAction::Kind::kProbe:
      return "probe";
    case LifecycleAction::Kind::kKill:
      return "kill";
    case LifecycleAction::Kind::kStop:
      return "stop";
    case LifecycleAction::Kind::kForget:
      return "forget";
  }
  return "?";
}

ReplicaSet::ReplicaSet(std::string deployment, LifecycleOptions options)
    : deployment_(std::move(deployment)), options_(options) {}

Replica* ReplicaSet::Get(std::string_view replica) {
  for (Replica& r : replicas_) {
    if (r.name == replica) return &r;
  }
  return nullptr;
}

const Replica* ReplicaSet::Find(std::string_view replica) const {
  for (const Replica& r : replicas_) {
    if (r.name == replica) return &r;
  }
  return nullptr;
}

void ReplicaSet::Event(LifecycleOutput* out, const char* kind, const Replica& r,
                       std::string message, json details) {
  if (out == nullptr) return;
  if (details.is_null()) details = json::object();
  out->events.push_back(
      {kind, r.name, absl::StrCat(r.name, " ", message), std::move(details)});
}

int ReplicaSet::ready() const {
  int n = 0;
  for (const Replica& r : replicas_) {
    n += r.version == version_ && r.state == ReplicaState::kReady;
  }
  return n;
}

int ReplicaSet::starting() const {
  int n = 0;
  for (const Replica& r : replicas_) {
    n += r.version == version_ && r.state != ReplicaState::kReady &&
         r.state != ReplicaState::kDraining;
  }
  return n;
}

void ReplicaSet::SetInFlight(std::string_view replica, int64_t n, Micros now) {
  Replica* r = Get(replica);
  if (r == nullptr) return;
  r->in_flight = n;
  if (n > 0) r->last_busy = now;
}

bool ReplicaSet::Unplaced(std::string_view replica, const std::string& why,
                          Micros retry_at) {
  Replica* r = Get(replica);
  if (r == nullptr) return false;
  r->launching = false;
  if (r->state == ReplicaState::kDraining) return false;
  r->state = ReplicaState::kPending;
  r->next_start = retry_at;
  if (r->message == why) return false;
  r->message = why;
  return true;
}

void ReplicaSet::Backoff(Replica& r, Micros now) {
  r.backoff.OnExit(now);
  r.next_start = r.backoff.NextStart(now);
  r.state = ReplicaState::kBackoff;
}

void ReplicaSet::LaunchFailed(std::string_view replica, const std::string& why,
                              Micros now, LifecycleOutput* out) {
  Replica* r = Get(replica);
  if (r == nullptr) return;
  r->launching = false;
  if (r->state == ReplicaState::kDraining) return;
  Backoff(*r, now);
  r->message = why;
  Event(out, "replica.failed", *r, absl::StrCat("failed to start: ", why),
        json{{"replica", r->name},
             {"retry_in_s", ToSeconds(r->next_start - now)}});
}

void ReplicaSet::Launched(std::string_view replica, Micros now) {
  Replica* r = Get(replica);
  if (r == nullptr) return;
  r->launching = false;
  r->running = true;
  r->probing = false;
  r->started = now;
  r->last_busy = now;  // residency (swap_min_idle) counts from its start
  r->health_failures = 0;
  r->message.clear();
  r->backoff.OnStarted(now);
  if (r->state == ReplicaState::kDraining) {
    r->stop_sent = false;  // stopped at the next pass
    return;
  }
  r->state = ReplicaState::kStarting;
  r->next_probe = now + options_.starting_probe;
}

void ReplicaSet::Adopted(std::string_view replica, Micros now,
                         LifecycleOutput* out) {
  Replica* r = Get(replica);
  if (r == nullptr) return;
  Launched(replica, now);
  if (r->state != ReplicaState::kStarting) return;
  r->state = ReplicaState::kReady;
  r->next_probe =
      options_.health_period > 0 ? now + options_.health_period : kNever;
  Event(out, "replica.ready", *r, "ready (adopted)",
        json{{"replica", r->name}, {"startup_seconds", 0}});
}

void ReplicaSet::Retry(Micros now) {
  for (Replica& r : replicas_) {
    if (r.state == ReplicaState::kPending && !r.launching) {
      r.next_start = std::min(r.next_start, now);
    }
  }
}

void ReplicaSet::ProbeResult(std::string_view replica, bool ok, Micros now,
                             LifecycleOutput* out, std::string_view where) {
  Replica* r = Get(replica);
  if (r == nullptr || !r->probing) return;
  r->probing = false;
  if (!r->running) return;
  const Micros health = options_.health_period;
  switch (r->state) {
    case ReplicaState::kStarting:
      if (!ok) {
        r->next_probe = now + options_.starting_probe;
        return;
      }
      r->state = ReplicaState::kReady;
      r->next_probe = health > 0 ? now + health : kNever;
      Event(out, "replica.ready", *r,
            absl::StrFormat(
                "ready%s after %.2f s",
                where.empty() ? std::string() : " on " + std::string(where),
                ToSeconds(now - r->started)),
            json{{"replica", r->name},
                 {"startup_seconds", ToSeconds(now - r->started)}});
      return;
    case ReplicaState::kReady:
      if (ok) {
        r->health_failures = 0;
        r->next_probe = health > 0 ? now + health : kNever;
        return;
      }
      r->next_probe = now + std::min(health, kMicrosPerSecond);
      if (++r->health_failures >= options_.failure_threshold) {
        r->state = ReplicaState::kUnhealthy;
        r->message = absl::StrCat("failed ", r->health_failures,
                                  " health checks in a row; restarting");
        Event(out, "replica.unhealthy", *r, r->message,
              json{{"replica", r->name}, {"failures", r->health_failures}});
        if (out)
          out->actions.push_back({LifecycleAction::Kind::kKill, r->name});
      }
      return;
    default:
      return;
  }
}

void ReplicaSet::Exited(std::string_view replica, const std::string& how,
                        const std::string& hint, Micros now,
                        LifecycleOutput* out) {
  Replica* r = Get(replica);
  if (r == nullptr || !r->running) return;
  r->running = false;
  r->probing = false;
  if (r->state == ReplicaState::kDraining) {
    r->stop_sent = true;
    Event(out, "replica.stopped", *r, absl::StrCat("stopped (", how, ")"),
          json{{"replica", r->name}});
    return;
  }
  Backoff(*r, now);
  ++r->restarts;
  r->message =
      absl::StrCat("engine exited (", how, "); restarting in ",
                   absl::StrFormat("%.1f", ToSeconds(r->next_start - now)),
                   " s", hint.empty() ? "" : "; ", hint);
  Event(out, "replica.exited", *r, r->message,
        json{{"replica", r->name}, {"how", how}, {"restarts", r->restarts}});
}

void ReplicaSet::DrainOne(Replica& r, const std::string& why, Micros now,
                          LifecycleOutput* out) {
  if (r.state == ReplicaState::kDraining) return;
  r.state = ReplicaState::kDraining;
  r.drain_deadline =
      options_.drain_grace == kNever ? kNever : now + options_.drain_grace;
  r.message = why;
  Event(out, "replica.draining", r, absl::StrCat("draining: ", why),
        json{{"replica", r.name}, {"in_flight", r.in_flight}});
}

bool ReplicaSet::Move(std::string_view replica, const std::string& why) {
  Replica* r = Get(replica);
  if (r == nullptr) return false;
  if (r->state == ReplicaState::kDraining || r->moving) return true;
  r->moving = true;
  r->message = why;
  return true;
}

void ReplicaSet::Drain(std::string_view replica, const std::string& why,
                       Micros now, LifecycleOutput* out) {
  if (Replica* r = Get(replica)) DrainOne(*r, why, now, out);
}

void ReplicaSet::Reconcile(Micros now, LifecycleOutput* out,
                           int* launch_budget) {
  if (desired_ >= 0) {
    std::vector<Replica*> current;
    std::set<int> used;
    int ready_current = 0;
    for (Replica& r : replicas_) {
      used.insert(r.index);
      if (r.state == ReplicaState::kDraining || r.version != version_ ||
          r.moving) {
        continue;
      }
      current.push_back(&r);
      ready_current += r.state == ReplicaState::kReady;
    }
    // Missing replicas are created pending, at the lowest free index.
    int index = 0;
    std::vector<Replica> created;
    for (size_t n = current.size(); n < static_cast<size_t>(desired_); ++n) {
      while (used.count(index)) ++index;
      used.insert(index);
      Replica r;
      r.name = absl::StrCat(deployment_, "-", index);
      r.index = index;
      r.version = version_;
      r.backoff = RestartBackoff(options_.backoff);
      r.next_start = now;
      created.push_back(std::move(r));
    }
    // Extra replicas drain: not ready ones first (highest index first),
    // then the ready ones with the fewest requests in flight.
    std::sort(current.begin(), current.end(), [](Replica* a, Replica* b) {
      const bool ra = a->state == ReplicaState::kReady;
      const bool rb = b->state == ReplicaState::kReady;
      if (ra != rb) return ra;
      if (ra && a->in_flight != b->in_flight) {
        return a->in_flight > b->in_flight;
      }
      return a->index < b->index;
    });
    while (static_cast<int>(current.size()) > desired_) {
      DrainOne(*current.back(),
               desired_ == 0 ? "scaled to zero" : "scaled down", now, out);
      current.pop_back();
    }
    // Older versions drain once the new ones are ready, or at once when
    // they serve nothing anyway.
    for (Replica& r : replicas_) {
      if (r.state == ReplicaState::kDraining ||
          (r.version == version_ && !r.moving)) {
        continue;
      }
      if (r.state != ReplicaState::kReady || ready_current >= desired_) {
        DrainOne(r,
                 r.version != version_
                     ? "replaced by the deployment's new version"
                     : absl::StrCat("moved: ", r.message),
                 now, out);
      }
    }
    if (!created.empty()) {
      for (Replica& r : created) replicas_.push_back(std::move(r));
      std::sort(
          replicas_.begin(), replicas_.end(),
          [](const Replica& a, const Replica& b) { return a.index < b.index; });
    }
  }
  for (Replica& r : replicas_) {
    switch (r.state) {
      case ReplicaState::kPending:
      case ReplicaState::kBackoff:
        if (!r.launching && now >= r.next_start &&
            (launch_budget == nullptr || *launch_budget > 0)) {
          if (launch_budget != nullptr) --*launch_budget;
          r.launching = true;
          if (out)
            out->actions.push_back({LifecycleAction::Kind::kLaunch, r.name});
        }
        break;
      case ReplicaState::kStarting:
        if (now - r.started > options_.startup_timeout) {
          r.state = ReplicaState::kUnhealthy;
          r.message = absl::StrCat(
              "not ready after ",
              absl::StrFormat("%.0f", ToSeconds(options_.startup_timeout)),
              " s; restarting");
          Event(out, "replica.unhealthy", r, r.message,
                json{{"replica", r.name}});
          if (out)
            out->actions.push_back({LifecycleAction::Kind::kKill, r.name});
        } else if (!r.probing && now >= r.next_probe) {
          r.probing = true;
          if (out)
            out->actions.push_back({LifecycleAction::Kind::kProbe, r.name});
        }
        break;
      case ReplicaState::kReady:
        if (!r.probing && options_.health_period > 0 && now >= r.next_probe) {
          r.probing = true;
          if (out)
            out->actions.push_back({LifecycleAction::Kind::kProbe, r.name});
        }
        break;
      case ReplicaState::kUnhealthy:
        break;  // killed; its exit restarts it
      case ReplicaState::kDraining:
        if (!r.stop_sent &&
            (!r.running || r.in_flight == 0 || now >= r.drain_deadline)) {
          r.stop_sent = true;
          if (r.running && out) {
            out->actions.push_back({LifecycleAction::Kind::kStop, r.name});
          }
        }
        break;
    }
  }
  // Stopped replicas are forgotten (a launch still out waits for its
  // report).
  std::erase_if(replicas_, [&](const Replica& r) {
    if (r.state != ReplicaState::kDraining || !r.stop_sent || r.running ||
        r.launching) {
      return false;
    }
    if (out) out->actions.push_back({LifecycleAction::Kind::kForget, r.name});
    return true;
  });
}

Micros ReplicaSet::NextDeadline(bool pending) const {
  Micros next = kNever;
  for (const Replica& r : replicas_) {
    switch (r.state) {
      case ReplicaState::kPending:
      case ReplicaState::kBackoff:
        if (pending && !r.launching) next = std::min(next, r.next_start);
        break;
      case ReplicaState::kStarting:
        next = std::min(next, r.started + options_.startup_timeout + 1);
        if (!r.probing) next = std::min(next, r.next_probe);
        break;
      case ReplicaState::kReady:
        if (!r.probing && options_.health_period > 0) {
          next = std::min(next, r.next_probe);
        }
        break;
      case ReplicaState::kDraining:
        if (!r.stop_sent) {
          next = std::min(next, r.running && r.in_flight > 0 ? r.drain_deadline
                                                             : Micros{0});
        }
        break;
      case ReplicaState::kUnhealthy:
        break;
    }
  }
  return next;
}

}  // namespace gpusched::control
