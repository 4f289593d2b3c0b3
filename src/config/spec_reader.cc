#include "config/spec_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"
#include "config/quantity.h"

namespace gpusched::config {
namespace {

constexpr int kMaxWholeGpus = 64;  // as many as a node may hold

std::string Join(const std::string& path, absl::string_view key) {
  return absl::StrCat(path, ".", key);
}

// Keys the spec reader knows plus the caller's.
std::vector<absl::string_view> Keys(
    std::vector<absl::string_view> known,
    const std::vector<absl::string_view>& extra) {
  known.insert(known.begin(), extra.begin(), extra.end());
  return known;
}

// "a.b" names "a.b", "a.b.c" and "a.b[0]"; not "a.bc".
bool Covers(absl::string_view outer, absl::string_view inner) {
  return absl::StartsWith(inner, outer) &&
         (inner.size() == outer.size() || inner[outer.size()] == '.' ||
          inner[outer.size()] == '[');
}

}  // namespace

void SpecReader::Fail(const YAML::Node& at, const std::string& path,
                      absl::string_view what) {
  failed_paths_.push_back(path);
  Error(at, absl::StrCat(path, ": ", what));
}

bool SpecReader::String(const YAML::Node& n, const std::string& path,
                        std::string* out) {
  if (!n.IsScalar()) {
    Fail(n, path, absl::StrCat("must be a string, got ", YamlType(n)));
    return false;
  }
  if (n.Scalar().size() > static_cast<size_t>(kMaxStringBytes)) {
    Fail(n, path,
         absl::StrCat("is ", n.Scalar().size(), " bytes long; at most ",
                      kMaxStringBytes));
    return false;
  }
  if (const size_t bad = InvalidUtf8At(n.Scalar());
      bad != absl::string_view::npos) {
    Fail(n, path, absl::StrCat("is not valid UTF-8 (byte ", bad, ")"));
    return false;
  }
  *out = n.Scalar();
  return true;
}

bool SpecReader::Int(const YAML::Node& n, const std::string& path, int64_t lo,
                     int64_t hi, int64_t* out) {
  int64_t v = 0;
  if (n.IsScalar() && absl::SimpleAtoi(n.Scalar(), &v) && v >= lo && v <= hi) {
    *out = v;
    return true;
  }
  const bool unbounded = hi >= std::numeric_limits<int>::max();
  Fail(n, path,
       absl::StrCat("must be an integer ",
                    unbounded ? absl::StrCat(">= ", lo)
                              : absl::StrCat("in ", lo, "..", hi),
                    ", got ", YamlType(n)));
  return false;
}

bool SpecReader::Int(const YAML::Node& n, const std::string& path, int lo,
                     int* out) {
  int64_t v = 0;
  if (!Int(n, path, lo, std::numeric_limits<int>::max(), &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool SpecReader::Int(const YAML::Node& n, const std::string& path, int lo,
                     int hi, int* out) {
  int64_t v = 0;
  if (!Int(n, path, lo, hi, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool SpecReader::Number(const YAML::Node& n, const std::string& path, double lo,
                        bool lo_open, double* out) {
  double v = 0;
  if (n.IsScalar() && absl::SimpleAtod(n.Scalar(), &v) && std::isfinite(v) &&
      (lo_open ? v > lo : v >= lo)) {
    *out = v;
    return true;
  }
  Fail(n, path,
       absl::StrCat("must be a number ", lo_open ? "> " : ">= ", lo, ", got ",
                    YamlType(n)));
  return false;
}

bool SpecReader::Map(const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) return true;
  Fail(n, path, absl::StrCat("must be a map, got ", YamlType(n)));
  return false;
}

bool SpecReader::StringList(const YAML::Node& n, const std::string& path,
                            std::vector<std::string>* out) {
  if (!n.IsSequence()) {
    Fail(n, path, absl::StrCat("must be a list, got ", YamlType(n)));
    return false;
  }
  if (n.size() > static_cast<size_t>(kMaxListItems)) {
    Fail(n, path,
         absl::StrCat("has ", n.size(), " items; at most ", kMaxListItems));
    return false;
  }
  std::vector<std::string> list;
  bool ok = true;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string s;
    if (String(n[i], absl::StrCat(path, "[", i, "]"), &s)) {
      list.push_back(std::move(s));
    } else {
      ok = false;
    }
  }
  if (ok) *out = std::move(list);
  return ok;
}

bool SpecReader::StringMap(const YAML::Node& n, const std::string& path,
                           std::map<std::string, std::string>* out) {
  if (!Map(n, path)) return false;
  if (n.size() > static_cast<size_t>(kMaxListItems)) {
    Fail(n, path,
         absl::StrCat("has ", n.size(), " entries; at most ", kMaxListItems));
    return false;
  }
  std::map<std::string, std::string> map;
  bool ok = true;
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string key, value;
    if (!String(it->first, path, &key)) {
      ok = false;
    } else if (String(it->second, Join(path, key), &value)) {
      map[key] = std::move(value);
    } else {
      ok = false;
    }
  }
  if (ok) *out = std::move(map);
  return ok;
}

void SpecReader::ReadName(const YAML::Node& map, const char* key,
                          const std::string& path, std::string* out) {
  const YAML::Node n = map[key];
  if (!n) {
    Fail(map, path, "required");
    return;
  }
  std::string name;
  if (!String(n, path, &name)) return;
  if (!ValidObjectName(name)) {
    Fail(n, path,
         absl::StrCat("'", name,
                      "' must be lower-case letters, digits, '-' and '.', "
                      "start and end with a letter or digit, at most 63 "
                      "characters"));
    return;
  }
  *out = std::move(name);
}

void SpecReader::ReadDeployment(const YAML::Node& spec, const YAML::Node& at,
                                const std::string& path,
                                const std::vector<absl::string_view>& extra,
                                const std::vector<std::string>& classes,
                                DeploymentSpec* d) {
  d->model = d->name;
  if (spec && Map(spec, path)) {
    CheckKeys(spec, path,
              Keys({"model", "engine", "endpoints", "resources", "replicas",
                    "priorityClass", "slo", "maxOngoingRequests", "router",
                    "queue", "kvBudgetTokens", "tenant", "autoscaling",
                    "preemptible", "spread"},
                   extra));
    if (const YAML::Node n = spec["model"]) {
      String(n, Join(path, "model"), &d->model);
    }
    if (const YAML::Node e = spec["engine"]) {
      const std::string p = Join(path, "engine");
      if (Map(e, p)) {
        CheckKeys(e, p, {"template", "args", "env", "weightsPath"});
        if (const YAML::Node n = e["weightsPath"]) {
          String(n, Join(p, "weightsPath"), &d->weights_path);
        }
        if (const YAML::Node n = e["template"]) {
          String(n, Join(p, "template"), &d->engine);
        }
        if (const YAML::Node n = e["args"]) {
          StringList(n, Join(p, "args"), &d->args);
        }
        if (const YAML::Node n = e["env"])
          StringMap(n, Join(p, "env"), &d->env);
      }
    }
    if (const YAML::Node e = spec["endpoints"]) {
      const std::string p = Join(path, "endpoints");
      std::vector<std::string> list;
      if (StringList(e, p, &list)) {
        for (size_t i = 0; i < list.size(); ++i) {
          HostPort hp;
          if (!ParseHostPort(list[i], &hp) || hp.port == 0) {
            Fail(e[i], absl::StrCat(p, "[", i, "]"),
                 absl::StrCat("must be host:port (port 1..65535), got '",
                              list[i], "'"));
          } else {
            d->endpoints.push_back(std::move(hp));
          }
        }
      }
    }
    if (const YAML::Node r = spec["resources"]) {
      ReadResources(r, Join(path, "resources"), &d->resources);
    }
    if (const YAML::Node r = spec["replicas"]) {
      ReadReplicas(r, Join(path, "replicas"), d);
    }
    if (const YAML::Node n = spec["priorityClass"]) {
      String(n, Join(path, "priorityClass"), &d->priority_class);
    }
    if (const YAML::Node s = spec["slo"]) {
      const std::string p = Join(path, "slo");
      if (Map(s, p)) {
        CheckKeys(s, p, {"ttftMs", "tpotMs"});
        if (const YAML::Node n = s["ttftMs"]) {
          Number(n, Join(p, "ttftMs"), 0, false, &d->ttft_slo_ms);
        }
        if (const YAML::Node n = s["tpotMs"]) {
          Number(n, Join(p, "tpotMs"), 0, false, &d->tpot_slo_ms);
        }
      }
    }
    if (const YAML::Node a = spec["autoscaling"]) {
      ReadAutoscaling(a, spec["replicas"], Join(path, "autoscaling"), d);
    }
    if (const YAML::Node n = spec["maxOngoingRequests"]) {
      Int(n, Join(path, "maxOngoingRequests"), 1, &d->max_ongoing_requests);
    }
    if (const YAML::Node n = spec["spread"]) {
      String(n, Join(path, "spread"), &d->spread);
    }
    if (const YAML::Node r = spec["router"]) {
      const std::string p = Join(path, "router");
      if (Map(r, p)) {
        CheckKeys(r, p,
                  {"policy", "loadBoundEpsilon", "affinityBlocks",
                   "sessionFallback", "prefixBlockChars"});
        if (const YAML::Node n = r["policy"]) {
          String(n, Join(p, "policy"), &d->router.policy);
        }
        if (const YAML::Node n = r["loadBoundEpsilon"]) {
          Number(n, Join(p, "loadBoundEpsilon"), 0, true,
                 &d->router.load_bound_epsilon);
        }
        if (const YAML::Node n = r["affinityBlocks"]) {
          Int(n, Join(p, "affinityBlocks"), 1, &d->router.affinity_blocks);
        }
        if (const YAML::Node n = r["sessionFallback"]) {
          String(n, Join(p, "sessionFallback"), &d->router.session_fallback);
        }
        if (const YAML::Node n = r["prefixBlockChars"]) {
          Int(n, Join(p, "prefixBlockChars"), 8, 65536,
              &d->router.prefix_block_chars);
        }
      }
    }
    if (const YAML::Node q = spec["queue"]) {
      const std::string p = Join(path, "queue");
      if (Map(q, p)) {
        CheckKeys(q, p, {"order", "maxQueueSize"});
        if (const YAML::Node n = q["order"]) {
          String(n, Join(p, "order"), &d->queue_order);
        }
        if (const YAML::Node n = q["maxQueueSize"]) {
          Int(n, Join(p, "maxQueueSize"), 0,
              std::numeric_limits<int64_t>::max(), &d->max_queue_size);
        }
      }
    }
    if (const YAML::Node n = spec["kvBudgetTokens"]) {
      Int(n, Join(path, "kvBudgetTokens"), 0,
          std::numeric_limits<int64_t>::max(), &d->kv_budget_tokens);
    }
    if (const YAML::Node n = spec["tenant"]) {
      String(n, Join(path, "tenant"), &d->tenant);
    }
    if (const YAML::Node n = spec["preemptible"]) {
      Bool(n, Join(path, "preemptible"), &d->preemptible);
    }
  }
  std::vector<std::string> problems;
  CheckDeployment(*d, classes, &problems);
  ReportProblems(problems, spec, at, path);
}

void SpecReader::ReadAutoscaling(const YAML::Node& a,
                                 const YAML::Node& replicas,
                                 const std::string& path, DeploymentSpec* d) {
  const bool replicas_range = replicas && replicas.IsMap();
  if (!Map(a, path)) return;
  CheckKeys(a, path,
            {"minReplicas", "maxReplicas", "policy", "targetOngoingRequests",
             "lookBackPeriodS", "upscaleDelayS", "downscaleDelayS",
             "maxConcurrentStarts", "idleTimeoutS", "sloPercentile",
             "sloWindowS", "sloHeadroom", "maxHeld", "holdTimeoutS"});
  if (replicas_range) {
    Fail(a, path,
         "replicas must be one integer (the initial count) when autoscaling "
         "is set; put the range in minReplicas and maxReplicas");
  }
  autoscale::AutoscalingConfig c;
  if (const YAML::Node n = a["minReplicas"]) {
    Int(n, Join(path, "minReplicas"), 0, kMaxReplicas, &c.min_replicas);
  }
  c.max_replicas = std::max(c.min_replicas, 1);
  if (const YAML::Node n = a["maxReplicas"]) {
    Int(n, Join(path, "maxReplicas"), 0, kMaxReplicas, &c.max_replicas);
  }
  if (const YAML::Node n = a["policy"]) {
    std::string name;
    if (String(n, Join(path, "policy"), &name) &&
        !autoscale::ParsePolicy(name, &c.policy)) {
      Fail(n, Join(path, "policy"),
           absl::StrCat("must be target-ongoing or slo, got '", name, "'"));
    }
  }
  const std::pair<const char*, double*> numbers[] = {
      {"targetOngoingRequests", &c.target_ongoing_requests},
      {"lookBackPeriodS", &c.look_back_period_s},
      {"upscaleDelayS", &c.upscale_delay_s},
      {"downscaleDelayS", &c.downscale_delay_s},
      {"idleTimeoutS", &c.idle_timeout_s},
      {"sloPercentile", &c.slo_percentile},
      {"sloWindowS", &c.slo_window_s},
      {"sloHeadroom", &c.slo_headroom},
  };
  for (const auto& [key, out] : numbers) {
    if (const YAML::Node n = a[key]) Number(n, Join(path, key), 0, false, out);
  }
  if (const YAML::Node n = a["maxConcurrentStarts"]) {
    Int(n, Join(path, "maxConcurrentStarts"), 1, &c.max_concurrent_starts);
  }
  if (const YAML::Node n = a["maxHeld"]) {
    Int(n, Join(path, "maxHeld"), 1, std::numeric_limits<int64_t>::max(),
        &d->max_held);
  }
  if (const YAML::Node n = a["holdTimeoutS"]) {
    Number(n, Join(path, "holdTimeoutS"), 0, true, &d->hold_timeout_s);
  }
  c.slo_ttft_s = d->ttft_slo_ms / 1000.0;
  // replicas: N (or absent) is the initial count.
  const bool desired_given = replicas && !replicas_range;
  d->min_replicas = c.min_replicas;
  d->max_replicas = c.max_replicas;
  if (!desired_given) d->replicas = c.min_replicas;
  d->autoscaling = c;
}

void SpecReader::ReadReplicas(const YAML::Node& r, const std::string& path,
                              DeploymentSpec* d) {
  if (!r.IsMap()) {
    int n = 0;
    if (Int(r, path, 0, kMaxReplicas, &n))
      d->replicas = d->min_replicas = d->max_replicas = n;
    return;
  }
  CheckKeys(r, path, {"min", "max", "desired"});
  for (const char* key : {"min", "max"}) {
    if (!r[key]) Fail(r, Join(path, key), "required");
  }
  if (const YAML::Node n = r["min"])
    Int(n, Join(path, "min"), 0, kMaxReplicas, &d->min_replicas);
  if (const YAML::Node n = r["max"])
    Int(n, Join(path, "max"), 0, kMaxReplicas, &d->max_replicas);
  d->replicas = d->min_replicas;
  if (const YAML::Node n = r["desired"]) {
    Int(n, Join(path, "desired"), 0, kMaxReplicas, &d->replicas);
  }
}

void SpecReader::ReadResources(const YAML::Node& r, const std::string& path,
                               ResourceSpec* out) {
  if (!Map(r, path)) return;
  CheckKeys(
      r, path,
      {"whole", "fraction", "mig", "gpuModels", "nvlink", "cpu", "memory"});
  std::vector<std::string> kinds;
  for (const char* k : {"whole", "fraction", "mig"}) {
    if (r[k]) kinds.push_back(k);
  }
  if (kinds.size() > 1) {
    Fail(r, path,
         absl::StrCat("set one of whole, fraction and mig, not ",
                      absl::StrJoin(kinds, " and ")));
  } else if (const YAML::Node n = r["whole"]) {
    int64_t gpus = 0;
    if (Int(n, Join(path, "whole"), 1, kMaxWholeGpus, &gpus)) {
      out->kind = "whole";
      out->gpus = static_cast<int>(gpus);
    }
  } else if (const YAML::Node f = r["fraction"]) {
    const std::string p = Join(path, "fraction");
    if (Map(f, p)) {
      out->kind = "fraction";
      CheckKeys(f, p, {"milli", "memory"});
      if (const YAML::Node n = f["milli"]) {
        int64_t milli = 0;
        if (Int(n, Join(p, "milli"), 1, 1000, &milli)) {
          out->milli = static_cast<int>(milli);
        }
      }
      if (const YAML::Node n = f["memory"]) {
        const std::string mp = Join(p, "memory");
        if (!YamlReader::Quantity(n, mp, &ParseMemoryMib, "10Gi",
                                  &out->gpu_memory_mib)) {
          failed_paths_.push_back(mp);
        }
      }
    }
  } else if (const YAML::Node n = r["mig"]) {
    if (String(n, Join(path, "mig"), &out->mig_profile)) out->kind = "mig";
  }
  if (const YAML::Node n = r["gpuModels"]) {
    StringList(n, Join(path, "gpuModels"), &out->gpu_models);
  }
  if (const YAML::Node n = r["nvlink"]) {
    String(n, Join(path, "nvlink"), &out->nvlink);
  }
  struct Amount {
    const char* key;
    std::optional<int64_t> (*parse)(absl::string_view);
    const char* example;
    int64_t* out;
  };
  for (const Amount& a :
       {Amount{"cpu", &ParseCpuMilli, "\"1\" or 500m", &out->cpu_milli},
        Amount{"memory", &ParseMemoryMib, "2Gi", &out->memory_mib}}) {
    if (const YAML::Node n = r[a.key]) {
      const std::string p = Join(path, a.key);
      if (!YamlReader::Quantity(n, p, a.parse, a.example, a.out)) {
        failed_paths_.push_back(p);
      }
    }
  }
}

void SpecReader::ReadTenant(const YAML::Node& spec, const YAML::Node& at,
                            const std::string& path,
                            const std::vector<absl::string_view>& extra,
                            const std::vector<std::string>& classes,
                            TenantSpec* t) {
  if (spec && Map(spec, path)) {
    CheckKeys(
        spec, path,
        Keys({"models", "weight", "priorityClass", "limits", "quota"}, extra));
    if (const YAML::Node n = spec["models"]) {
      StringList(n, Join(path, "models"), &t->models);
    }
    if (const YAML::Node n = spec["weight"]) {
      Number(n, Join(path, "weight"), 0, true, &t->weight);
    }
    if (const YAML::Node n = spec["priorityClass"]) {
      String(n, Join(path, "priorityClass"), &t->priority_class);
    }
    if (const YAML::Node l = spec["limits"]) {
      const std::string p = Join(path, "limits");
      if (Map(l, p)) {
        CheckKeys(l, p,
                  {"requestsPerMinute", "tokensPerMinute", "burstMinutes",
                   "maxQueued", "maxConcurrency"});
        if (const YAML::Node n = l["requestsPerMinute"]) {
          Number(n, Join(p, "requestsPerMinute"), 0, false,
                 &t->limits.requests_per_minute);
        }
        if (const YAML::Node n = l["tokensPerMinute"]) {
          Number(n, Join(p, "tokensPerMinute"), 0, false,
                 &t->limits.tokens_per_minute);
        }
        if (const YAML::Node n = l["burstMinutes"]) {
          Number(n, Join(p, "burstMinutes"), 0, true, &t->limits.burst_minutes);
        }
        if (const YAML::Node n = l["maxQueued"]) {
          Int(n, Join(p, "maxQueued"), 0, std::numeric_limits<int64_t>::max(),
              &t->limits.max_queued);
        }
        if (const YAML::Node n = l["maxConcurrency"]) {
          Int(n, Join(p, "maxConcurrency"), 0,
              std::numeric_limits<int64_t>::max(), &t->limits.max_concurrency);
        }
      }
    }
    if (const YAML::Node q = spec["quota"]) {
      const std::string p = Join(path, "quota");
      if (Map(q, p)) {
        CheckKeys(q, p, {"gpus", "limit", "overQuotaWeight"});
        if (const YAML::Node n = q["gpus"]) {
          Number(n, Join(p, "gpus"), 0, false, &t->quota.gpus);
        }
        if (const YAML::Node n = q["limit"]) {
          Number(n, Join(p, "limit"), 0, false, &t->quota.limit);
        }
        if (const YAML::Node n = q["overQuotaWeight"]) {
          Number(n, Join(p, "overQuotaWeight"), 0, false,
                 &t->quota.over_quota_weight);
        }
      }
    }
  }
  std::vector<std::string> problems;
  CheckTenant(*t, classes, &problems);
  ReportProblems(problems, spec, at, path);
}

bool SpecReader::AlreadyReported(absl::string_view path) const {
  for (const std::string& failed : failed_paths_) {
    if (Covers(failed, path) || Covers(path, failed)) return true;
  }
  return false;
}

void SpecReader::ReportProblems(const std::vector<std::string>& problems,
                                const YAML::Node& spec, const YAML::Node& at,
                                const std::string& path) {
  for (const std::string& problem : problems) {
    // "spec.a.b: what" -> fields {a, b} under `spec`.
    const size_t colon = problem.find(": ");
    absl::string_view field_path = absl::string_view(problem).substr(0, colon);
    std::string what =
        colon == std::string::npos ? problem : problem.substr(colon + 2);
    if (!absl::ConsumePrefix(&field_path, "spec")) {
      Error(at, absl::StrCat(path, ": ", problem));
      continue;
    }
    const std::string full = absl::StrCat(path, field_path);
    if (AlreadyReported(full)) continue;
    // reset() rebinds; assigning a YAML::Node would write into the tree.
    YAML::Node node;
    node.reset(spec ? spec : at);
    // Each segment is a key with any list indexes after it
    // ("targets[1]"): the line is the deepest node the path reaches.
    for (absl::string_view segment :
         absl::StrSplit(field_path, '.', absl::SkipEmpty())) {
      const size_t bracket = segment.find('[');
      if (!node.IsMap()) break;
      const YAML::Node& map = node;
      const YAML::Node child = map[std::string(segment.substr(0, bracket))];
      if (!child) break;
      node.reset(child);
      bool reached = true;
      for (size_t at = bracket; at != absl::string_view::npos && reached;
           at = segment.find('[', at + 1)) {
        size_t index = 0;
        const size_t close = segment.find(']', at);
        reached =
            close != absl::string_view::npos && node.IsSequence() &&
            absl::SimpleAtoi(segment.substr(at + 1, close - at - 1), &index) &&
            index < node.size();
        if (reached) {
          const YAML::Node& list = node;
          node.reset(list[index]);
        }
      }
      if (!reached) break;
    }
    Fail(node, full, what);
  }
}

}  // namespace gpusched::config
