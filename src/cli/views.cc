#include "cli/views.h"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/table.h"

namespace gpusched::cli {

// ---- JSON access that never throws (the server's answers are input).

const Json* Find(const Json& j, std::initializer_list<const char*> path) {
  const Json* at = &j;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string Dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string Text(const Json* v, const std::string& none) {
  if (v == nullptr || v->is_null()) return none;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_float()) return absl::StrCat(v->get<double>());
  return Dump(*v);
}

std::string Text(const Json& j, std::initializer_list<const char*> path,
                 const std::string& none) {
  return Text(Find(j, path), none);
}

// Text, with "-" for a missing or empty value (a table cell).
std::string Cell(const Json& j, std::initializer_list<const char*> path) {
  std::string s = Text(j, path);
  return s.empty() ? "-" : s;
}

double Number(const Json& j, std::initializer_list<const char*> path) {
  const Json* v = Find(j, path);
  return v != nullptr && v->is_number() ? v->get<double>() : 0;
}

const Json& Array(const Json& j, std::initializer_list<const char*> path) {
  static const Json* const kEmpty = new Json(Json::array());
  const Json* v = Find(j, path);
  return v != nullptr && v->is_array() ? *v : *kEmpty;
}

// {"a": 1, "b": "x"} as "a=1 b=x"; "-" when empty.
std::string KeyValues(const Json* obj) {
  if (obj == nullptr || !obj->is_object() || obj->empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [k, v] : obj->items()) {
    parts.push_back(absl::StrCat(k, "=", Text(&v)));
  }
  return absl::StrJoin(parts, " ");
}

// ---- Formatting.

std::string Lower(std::string s) {
  absl::AsciiStrToLower(&s);
  return s;
}

std::string Indent(const std::string& text) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

// 10240 -> "10Gi", 81559 -> "79.6Gi", 512 -> "512Mi".
std::string FormatMiB(double mib) {
  if (mib < 1024) return absl::StrCat(mib, "Mi");
  std::string s = absl::StrFormat("%.1f", mib / 1024);
  if (absl::EndsWith(s, ".0")) s.resize(s.size() - 2);
  return s + "Gi";
}

std::optional<absl::Time> ParseRfc3339(const std::string& s) {
  absl::Time t;
  std::string why;
  if (s.empty() || !absl::ParseTime(absl::RFC3339_full, s, &t, &why)) {
    return std::nullopt;
  }
  return t;
}

// Kubernetes-style: 45s, 12m, 5h, 3d.
std::string FormatAge(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  if (d < absl::Minutes(2)) return absl::StrCat(absl::ToInt64Seconds(d), "s");
  if (d < absl::Hours(2)) return absl::StrCat(absl::ToInt64Minutes(d), "m");
  if (d < absl::Hours(48)) return absl::StrCat(absl::ToInt64Hours(d), "h");
  return absl::StrCat(absl::ToInt64Hours(d) / 24, "d");
}

std::string Age(const Json& j, std::initializer_list<const char*> path,
                absl::Time now) {
  const std::optional<absl::Time> t = ParseRfc3339(Text(j, path));
  return t ? FormatAge(now - *t) : "-";
}

std::string EventTime(const Json& e) {
  std::optional<absl::Time> t;
  if (const Json* us = Find(e, {"timeMicros"}); us && us->is_number()) {
    t = absl::FromUnixMicros(us->get<int64_t>());
  } else {
    t = ParseRfc3339(Text(e, {"time"}));
  }
  if (!t) return Cell(e, {"time"});
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", *t, absl::UTCTimeZone());
}

std::string Resources(const Json& d) {
  if (!Array(d, {"spec", "endpoints"}).empty()) {
    return absl::StrCat("external (", Array(d, {"spec", "endpoints"}).size(),
                        ")");
  }
  const Json* r = Find(d, {"spec", "resources"});
  if (r == nullptr) return "-";
  if (const double whole = Number(*r, {"whole"}); whole > 0) {
    return absl::StrCat(whole, whole == 1 ? " GPU" : " GPUs");
  }
  if (const double milli = Number(*r, {"fraction", "milli"}); milli > 0) {
    const std::string memory = Text(*r, {"fraction", "memory"});
    return absl::StrCat(milli, "m GPU", memory.empty() ? "" : ", ", memory);
  }
  if (const std::string mig = Text(*r, {"mig"}); !mig.empty()) {
    return "MIG " + mig;
  }
  return "none";
}

std::string Parked(const Json& d) {
  const std::string route = Text(d, {"status", "parkedBy"});
  return route.empty() ? "" : absl::StrCat("parked by route ", route);
}

std::string Replicas(const Json& d) {
  if (const std::string parked = Parked(d); !parked.empty()) {
    return absl::StrCat("0 (", parked, ")");
  }
  const std::string n = Cell(d, {"spec", "replicas"});
  const std::string lo = Text(d, {"spec", "minReplicas"});
  const std::string hi = Text(d, {"spec", "maxReplicas"});
  if (lo.empty() || lo == hi) return n;
  return absl::StrCat(n, " (", lo, "-", hi, ")");
}

std::string Engine(const Json& d) {
  const Json* e = Find(d, {"spec", "engine"});
  if (e != nullptr && e->is_object()) return Cell(*e, {"template"});
  return Text(e, "-");
}

// "0,1" for whole GPUs, "0(250m)" for a share, "2(1g.10gb@3)" for a MIG
// slice (its instance's first slot).
std::string ReplicaGpus(const Json& r) {
  std::vector<std::string> parts;
  for (const Json& s : Array(r, {"gpuShare"})) {
    const double milli = Number(s, {"milli"});
    if (const std::string mig = Text(s, {"mig"}); !mig.empty()) {
      const std::string start = Text(s, {"migStart"});
      parts.push_back(absl::StrCat(Text(s, {"gpu"}), "(", mig,
                                   start.empty() ? "" : "@", start, ")"));
      continue;
    }
    parts.push_back(absl::StrCat(
        Text(s, {"gpu"}),
        milli > 0 && milli < 1000 ? absl::StrCat("(", milli, "m)") : ""));
  }
  if (parts.empty()) {
    for (const Json& g : Array(r, {"gpus"})) parts.push_back(Text(&g));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

// ---- Tables, one per kind.

Rows DeploymentRows(const Json& items, absl::Time now) {
  Rows rows = {
      {"NAME", "REPLICAS", "READY", "ENGINE", "MODEL", "RESOURCES", "AGE"}};
  for (const Json& d : items) {
    const std::string ready = absl::StrCat(
        Text(d, {"status", "readyReplicas"}, "0"), "/",
        Text(d, {"status", "replicas"}, Text(d, {"spec", "replicas"}, "0")));
    rows.push_back({Text(d, {"metadata", "name"}), Replicas(d), ready,
                    Engine(d), Cell(d, {"spec", "model"}), Resources(d),
                    Age(d, {"metadata", "created"}, now)});
  }
  return rows;
}

Rows ReplicaRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "DEPLOYMENT", "STATE", "ENDPOINT", "GPUS", "RESTARTS"}};
  for (const Json& r : items) {
    rows.push_back({Text(r, {"name"}), Text(r, {"deployment"}),
                    Text(r, {"state"}), Cell(r, {"endpoint"}), ReplicaGpus(r),
                    Text(r, {"restarts"}, "0")});
  }
  return rows;
}

Rows TenantRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "MODELS", "WEIGHT", "PRIORITY"}};
  for (const Json& t : items) {
    std::vector<std::string> models;
    for (const Json& m : Array(t, {"spec", "models"})) {
      models.push_back(Text(&m));
    }
    rows.push_back({Text(t, {"metadata", "name"}),
                    models.empty() ? "*" : absl::StrJoin(models, ","),
                    Cell(t, {"spec", "weight"}),
                    Cell(t, {"spec", "priorityClass"})});
  }
  return rows;
}

Rows GpuRows(const Json& items, absl::Time) {
  Rows rows = {{"NODE", "INDEX", "MODEL", "MEMORY", "ALLOCATED", "REPLICAS"}};
  for (const Json& g : items) {
    const double milli = Number(g, {"allocatedMilli"});
    const double mib = Number(g, {"allocatedMemoryMiB"});
    std::vector<std::string> replicas;
    for (const Json& r : Array(g, {"replicas"})) {
      replicas.push_back(Text(r, {"name"}));
    }
    std::string model = Cell(g, {"model"});
    if (const Json* h = Find(g, {"healthy"}); h && h->is_boolean() && !*h) {
      model += " (unhealthy)";
    }
    rows.push_back({Text(g, {"node"}), Text(g, {"index"}), model,
                    FormatMiB(Number(g, {"memoryMiB"})),
                    milli == 0 && mib == 0
                        ? "-"
                        : absl::StrCat(milli, "m ", FormatMiB(mib)),
                    replicas.empty() ? "-" : absl::StrJoin(replicas, ",")});
  }
  return rows;
}

Rows NodeRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "GPUS", "GPU-MODEL", "CPU", "MEMORY", "GPU-ALLOCATED",
                "SIMULATED", "POOL"}};
  for (const Json& n : items) {
    // A pool node (capacity on demand): its pool and capacity state.
    const std::string pool = Text(n, {"pool"});
    rows.push_back(
        {Text(n, {"name"}), Text(n, {"gpus"}, "0"), Cell(n, {"gpuModel"}),
         absl::StrCat(Number(n, {"cpuMilli"}) / 1000),
         FormatMiB(Number(n, {"memoryMiB"})),
         absl::StrCat(Number(n, {"allocatedGpuMilli"}), "m"),
         Text(n, {"simulated"}, "false"),
         pool.empty() ? "-"
                      : absl::StrCat(pool, "/", Cell(n, {"capacityState"}))});
  }
  return rows;
}

// Capacity on demand: each pool with its nodes by state (docs/capacity.md).
Rows PoolRows(const Json& items, absl::Time) {
  Rows rows = {{"NAME", "GPU", "GPUS/NODE", "SPOT", "$/NODE-HOUR", "NODES",
                "COMING", "GOING", "DELAY", "COST"}};
  for (const Json& p : items) {
    int up = 0, coming = 0, going = 0;
    if (const Json* nodes = Find(p, {"nodes"}); nodes && nodes->is_object()) {
      for (const auto& [name, n] : nodes->items()) {
        const std::string state = Cell(n, {"state"});
        up += state == "up";
        coming += state == "powering_up";
        going += state == "powering_down";
      }
    }
    rows.push_back(
        {Text(p, {"name"}), Cell(p, {"gpu"}), Text(p, {"gpusPerNode"}, "0"),
         Text(p, {"spot"}, "false"),
         absl::StrFormat("%.2f", Number(p, {"pricePerNodeHour"})),
         absl::StrCat(up, "/", Text(p, {"maxNodes"}, "0")),
         absl::StrCat(coming), absl::StrCat(going),
         absl::StrFormat("%.0fs", Number(p, {"provisioningDelaySeconds"})),
         absl::StrFormat("$%.2f", Number(p, {"costUsd"}))});
  }
  return rows;
}

Rows QueueRows(const Json& items, absl::Time) {
  Rows rows = {{"DEPLOYMENT", "QUEUED", "IN-FLIGHT", "READY-REPLICAS"}};
  for (const Json& q : items) {
    rows.push_back({Text(q, {"deployment"}), Text(q, {"queued"}, "0"),
                    Text(q, {"in_flight"}, "0"),
                    Text(q, {"replicas_ready"}, "0")});
  }
  return rows;
}

// A route's `created` is wall-clock microseconds since the epoch.
std::optional<absl::Time> RouteCreated(const Json& r) {
  const Json* us = Find(r, {"created"});
  if (us == nullptr || !us->is_number() || Number(r, {"created"}) <= 0) {
    return std::nullopt;
  }
  return absl::FromUnixMicros(static_cast<int64_t>(us->get<double>()));
}

std::string RouteAge(const Json& r, absl::Time now) {
  const std::optional<absl::Time> t = RouteCreated(r);
  return t ? FormatAge(now - *t) : "-";
}

Rows RouteRows(const Json& items, absl::Time now) {
  Rows rows = {{"NAME", "VERSIONS", "STICKY", "ROLLOUT", "AGE"}};
  for (const Json& r : items) {
    std::vector<std::string> split;
    for (const Json& t : Array(r, {"targets"})) {
      split.push_back(absl::StrCat(Text(t, {"version"}), "=",
                                   Text(t, {"weight"}, "0"), "%"));
    }
    std::string rollout = "-";
    if (Find(r, {"rollout"}) != nullptr) {
      rollout = absl::StrCat(Text(r, {"rollout", "phase"}), " ",
                             Text(r, {"rollout", "step"}), "/",
                             Array(r, {"rollout", "steps"}).size());
    }
    rows.push_back({Text(r, {"name"}), absl::StrJoin(split, " "),
                    Text(r, {"sticky"}), rollout, RouteAge(r, now)});
  }
  return rows;
}

void DescribeRollout(const Json& r, std::ostream& out) {
  out << "Route:     " << Text(r, {"name"}) << "\n";
  std::vector<std::string> split;
  for (const Json& t : Array(r, {"targets"})) {
    split.push_back(absl::StrCat(Text(t, {"version"}), " (",
                                 Text(t, {"deployment"}), ") ",
                                 Text(t, {"weight"}, "0"), "%"));
  }
  out << "Weights:   " << absl::StrJoin(split, ", ") << "\n";
  if (Find(r, {"rollout"}) == nullptr) {
    out << "Rollout:   none\n";
    return;
  }
  const Json& ro = r["rollout"];
  std::vector<std::string> steps;
  for (const Json& s : Array(ro, {"steps"})) steps.push_back(Dump(s) + "%");
  const std::string baseline = Text(ro, {"baseline"});
  out << "Canary:    " << Text(ro, {"canary"}) << " (stable "
      << Text(ro, {"stable"})
      << (baseline.empty()
              ? std::string()
              : absl::StrCat(", baseline ", baseline,
                             ": the analysis compares the canary with it"))
      << ")\n"
      << "Phase:     " << Text(ro, {"phase"}) << ", step " << Text(ro, {"step"})
      << " of " << steps.size() << " (" << absl::StrJoin(steps, " -> ")
      << "), canary at " << Text(ro, {"canaryWeight"}) << "%\n";
  const Json* manual = Find(ro, {"manualStep"});
  if (manual != nullptr && manual->is_boolean() && manual->get<bool>()) {
    out << "Next step: a manual step: waits for `gpusched rollout promote "
        << Text(r, {"name"}) << "`\n";
  } else if (const Json* next = Find(ro, {"nextStepInSeconds"});
             next != nullptr && next->is_number()) {
    out << "Next step: analysis due in "
        << static_cast<int64_t>(next->get<double>()) << " s\n";
  }
  if (!Text(ro, {"reason"}).empty()) {
    out << "Reason:    " << Text(ro, {"reason"}) << "\n";
  }
  const Json* a = Find(ro, {"analysis"});
  if (a != nullptr) {
    const std::string why = Text(*a, {"why"});
    out << "Analysis:  " << Text(*a, {"verdict"}) << ": "
        << (why.empty() ? "not evaluated yet" : why) << "\n";
    if (Find(*a, {"confidence"}) != nullptr) {
      out << "  confidence "
          << absl::StrFormat("%g%%", Number(*a, {"confidence"}) * 100)
          << ", at least " << Text(*a, {"minSamples"}, "0")
          << " samples a version\n";
    }
    for (const Json& c : Array(*a, {"checks"})) {
      out << "  " << Text(c, {"name"}) << " (" << Text(c, {"test"})
          << "): " << Text(c, {"verdict"}) << ": " << Text(c, {"why"}) << "\n";
    }
    for (const char* v : {"stable", "canary"}) {
      const auto ms = [&](const char* key) {
        return static_cast<int64_t>(Number(*a, {v, key}) * 1000);
      };
      // The analysis's reference side is the baseline where there is one.
      const bool ref = std::string_view(v) == "stable" && !baseline.empty();
      out << "  " << (ref ? "baseline" : v) << ": "
          << Text(*a, {v, "requests"}, "0") << " requests, "
          << Text(*a, {v, "errors"}, "0") << " errors, TTFT median "
          << ms("ttftMedianSeconds") << " ms, p"
          << absl::StrFormat("%g", Number(*a, {"percentile"})) << " "
          << ms("ttftSeconds") << " ms, end-to-end median "
          << ms("e2eMedianSeconds") << " ms\n";
    }
  }
}

// The server lists newest first; a terminal reads oldest first.
Rows EventRows(const Json& items, absl::Time) {
  Rows rows = {{"TIME", "KIND", "DEPLOYMENT", "MESSAGE"}};
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    rows.push_back({EventTime(*it), Text(*it, {"kind"}),
                    Cell(*it, {"deployment"}), Text(*it, {"message"})});
  }
  return rows;
}

Rows InstanceRows(const Json& items, absl::Time now) {
  Rows rows = {{"NAME", "ADDRESS", "ROLE", "VERSION", "AGE"}};
  for (const Json& i : items) {
    const bool leader = Find(i, {"leader"}) && i["leader"].is_boolean() &&
                        i["leader"].get<bool>();
    const bool self =
        Find(i, {"self"}) && i["self"].is_boolean() && i["self"].get<bool>();
    rows.push_back({Text(i, {"id"}), Text(i, {"address"}),
                    absl::StrCat(leader ? "leader" : "follower",
                                 self ? " (answering)" : ""),
                    Text(i, {"version"}), Age(i, {"started"}, now)});
  }
  return rows;
}

// Firing alerts (GET /api/v1/alerts: what Prometheus reports, with their
// runbooks), most severe first as the server sorts them.
Rows AlertRows(const Json& items, absl::Time now) {
  Rows rows = {{"ALERT", "SEVERITY", "LABELS", "SINCE", "SUMMARY", "RUNBOOK"}};
  for (const Json& a : items) {
    Json labels = Json::object();
    if (const Json* l = Find(a, {"labels"}); l != nullptr && l->is_object()) {
      for (auto it = l->begin(); it != l->end(); ++it) {
        if (it.key() != "severity") labels[it.key()] = it.value();
      }
    }
    rows.push_back({Text(a, {"name"}), Cell(a, {"severity"}),
                    KeyValues(&labels), Age(a, {"activeAt"}, now),
                    Text(a, {"summary"}), Cell(a, {"runbookUrl"})});
  }
  return rows;
}

// Every kind `apply` takes (Deployment, Tenant, ModelRoute) has get_one, a
// describe page and events; a route's events carry its name as their
// `deployment` (routes and deployments share one namespace).
constexpr KindInfo kKinds[] = {
    {"deployments", "deployment", true, nullptr, nullptr, DeploymentRows,
     "deploy", DescribeDeployment, "deployment"},
    {"replicas", "replica", false, nullptr, "name", ReplicaRows},
    {"tenants", "tenant", true, nullptr, nullptr, TenantRows, "",
     DescribeTenant, "tenant"},
    {"gpus", "gpu", false, nullptr, "node", GpuRows},
    {"nodes", "node", false, nullptr, "name", NodeRows},
    {"pools", "pool", false, nullptr, "name", PoolRows},
    {"queues", "queue", false, nullptr, "deployment", QueueRows},
    {"routes", "route", true, nullptr, nullptr, RouteRows,
     "modelroute modelroutes", DescribeRoute, "deployment"},
    {"events", "event", false, "deployment", nullptr, EventRows},
    {"instances", "instance", false, nullptr, "id", InstanceRows},
    {"alerts", "alert", false, nullptr, "name", AlertRows},
};

const KindInfo* FindKind(const std::string& name) {
  const std::string n = Lower(name);
  for (const KindInfo& k : kKinds) {
    if (n == k.plural || n == k.singular) return &k;
    for (absl::string_view a :
         absl::StrSplit(k.aliases, ' ', absl::SkipEmpty())) {
      if (n == a) return &k;
    }
  }
  return nullptr;
}

std::string KnownKinds() {
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) {
    names.push_back(absl::StrCat(
        k.plural,
        *k.aliases == '\0'
            ? ""
            : absl::StrCat(" (", absl::StrReplaceAll(k.aliases, {{" ", ", "}}),
                           ")")));
  }
  return absl::StrJoin(names, ", ");
}

std::string ObjectKinds() {
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) {
    if (k.describe != nullptr) names.push_back(k.singular);
  }
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

std::string Labels(const Json& obj) {
  return KeyValues(Find(obj, {"metadata", "labels"}));
}

std::string Created(const Json& obj, absl::Time now) {
  const std::string created = Cell(obj, {"metadata", "created"});
  const std::string age = Age(obj, {"metadata", "created"}, now);
  return age == "-" ? created : absl::StrCat(created, " (", age, " ago)");
}

void DescribeDeployment(const Json& d, absl::Time now, std::ostream& out) {
  std::vector<std::string> args;
  for (const Json& a : Array(d, {"spec", "engine", "args"})) {
    args.push_back(Text(&a));
  }
  std::vector<std::string> endpoints;
  for (const Json& e : Array(d, {"spec", "endpoints"})) {
    endpoints.push_back(Text(&e));
  }
  Rows fields = {
      {"Name:", Text(d, {"metadata", "name"})},
      {"Labels:", Labels(d)},
      {"Created:", Created(d, now)},
      {"Generation:", Cell(d, {"metadata", "generation"})},
      {"Model:", Cell(d, {"spec", "model"})},
      {"Engine:", absl::StrCat(Engine(d), args.empty() ? "" : " ",
                               absl::StrJoin(args, " "))},
      {"Resources:", Resources(d)},
      {"Priority:", Cell(d, {"spec", "priorityClass"})},
      {"Replicas:",
       Parked(d).empty()
           ? absl::StrCat(Replicas(d), " desired, ",
                          Text(d, {"status", "replicas"}, "0"), " running, ",
                          Text(d, {"status", "readyReplicas"}, "0"), " ready")
           : absl::StrCat("0 desired (", Parked(d), "; spec.replicas ",
                          Cell(d, {"spec", "replicas"}), " when unparked), ",
                          Text(d, {"status", "replicas"}, "0"), " running, ",
                          Text(d, {"status", "readyReplicas"}, "0"), " ready")},
      {"Requests:",
       absl::StrCat(Text(d, {"status", "queued"}, "0"), " queued, ",
                    Text(d, {"status", "inFlight"}, "0"), " in flight")},
  };
  if (!endpoints.empty()) {
    fields.push_back({"Endpoints:", absl::StrJoin(endpoints, " ")});
  }
  if (std::string m = Text(d, {"status", "message"}); !m.empty()) {
    fields.push_back({"Message:", m});
  }
  out << FormatTable(fields);
  const Json& replicas = Array(d, {"status", "replicaStatus"});
  if (replicas.empty()) {
    out << "Replica list: <none>\n";
  } else {
    Rows rows = {{"NAME", "STATE", "ENDPOINT", "NODE", "GPUS", "RESTARTS",
                  "STARTED", "MESSAGE"}};
    for (const Json& r : replicas) {
      rows.push_back({Text(r, {"name"}), Text(r, {"state"}),
                      Cell(r, {"endpoint"}), Cell(r, {"node"}), ReplicaGpus(r),
                      Text(r, {"restarts"}, "0"), Age(r, {"startedAt"}, now),
                      Text(r, {"message"})});
    }
    out << "Replica list:\n" << Indent(FormatTable(rows));
  }
}

void DescribeTenant(const Json& t, absl::Time now, std::ostream& out) {
  std::vector<std::string> models;
  for (const Json& m : Array(t, {"spec", "models"})) models.push_back(Text(&m));
  Rows fields = {
      {"Name:", Text(t, {"metadata", "name"})},
      {"Labels:", Labels(t)},
      {"Created:", Created(t, now)},
      {"Models:", models.empty() ? "* (all)" : absl::StrJoin(models, ", ")},
      {"Weight:", Cell(t, {"spec", "weight"})},
      {"Priority:", Cell(t, {"spec", "priorityClass"})},
      {"Limits:", KeyValues(Find(t, {"spec", "limits"}))},
      {"Quota:", KeyValues(Find(t, {"spec", "quota"}))},
  };
  if (const Json* s = Find(t, {"status"}); s && s->is_object()) {
    for (const auto& [k, v] : s->items()) {
      fields.push_back({absl::StrCat("Status ", k, ":"), Text(&v)});
    }
  }
  out << FormatTable(fields);
}

void DescribeRoute(const Json& r, absl::Time now, std::ostream& out) {
  DescribeRollout(r, out);
  const std::optional<absl::Time> created = RouteCreated(r);
  Rows fields = {
      {"Created:",
       created ? absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", *created,
                                               absl::UTCTimeZone()),
                              " (", FormatAge(now - *created), " ago)")
               : "-"},
      {"Generation:", Cell(r, {"generation"})},
      {"Sticky:", Cell(r, {"sticky"})},
  };
  if (const Json* shadow = Find(r, {"manifest", "spec", "shadow"});
      shadow != nullptr && shadow->is_object()) {
    fields.push_back({"Shadow:", KeyValues(shadow)});
  }
  out << FormatTable(fields);
}

}  // namespace gpusched::cli
