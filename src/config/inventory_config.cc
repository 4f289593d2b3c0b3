#include "config/inventory_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "config/quantity.h"
#include "config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpusched::config {
namespace {

constexpr absl::string_view kApiVersion = "gpusched.io/v1";
constexpr absl::string_view kKind = "Inventory";
// Placement's own per-node bound (ClusterState::kMaxGpusPerNode, fixed-size
// per-GPU arrays); a node above it is refused here, at its line, and not
// later by the cluster (config does not depend on inventory;
// DeclaredTest.TheConfigsGpuBoundIsPlacements holds the two equal).
constexpr int kMaxGpusPerNode = 16;
constexpr int kMaxNodeCount = 1000000;

class Parser : public YamlReader {
 public:
  explicit Parser(std::string source) : YamlReader(std::move(source)) {}

  absl::StatusOr<InventoryConfig> Parse(absl::string_view text) {
    InventoryConfig cfg;
    cfg.source = source();
    RETURN_IF_ERROR(ParseDocument(
        text, [&](const YAML::Node& root) { ParseRoot(root, cfg); }));
    return cfg;
  }

 private:
  // One of `quantity_key` (Kubernetes quantity) and `int_key` (integer);
  // exactly one required unless `optional`.
  bool Amount(const YAML::Node& parent, absl::string_view where,
              const char* quantity_key, const char* int_key,
              std::optional<int64_t> (*parse)(absl::string_view),
              const char* example, bool optional, int64_t* out) {
    const YAML::Node q = parent[quantity_key];
    const YAML::Node i = parent[int_key];
    if (q && i) {
      Error(i, absl::StrCat(where, ": set ", quantity_key, " or ", int_key,
                            ", not both"));
      return false;
    }
    if (!q && !i) {
      if (!optional) {
        Error(parent, absl::StrCat(where, ": missing ", quantity_key, " (e.g. ",
                                   example, ") or ", int_key));
      }
      return false;
    }
    if (i) {
      return Int(i, int_key, 0, std::numeric_limits<int64_t>::max() / 2, out);
    }
    return Quantity(q, quantity_key, parse, example, out);
  }

  void ParseRoot(const YAML::Node& root, InventoryConfig& cfg) {
    if (root.IsNull() || !root.IsDefined()) {
      Error(YAML::Mark::null_mark(),
            "empty file; expected an Inventory manifest (apiVersion: "
            "gpusched.io/v1, kind: Inventory)");
      return;
    }
    if (!root.IsMap()) {
      Error(root,
            absl::StrCat("expected a manifest map, got ", YamlType(root)));
      return;
    }
    CheckKeys(root, "the manifest", {"apiVersion", "kind", "metadata", "spec"});
    std::string s;
    const YAML::Node api = root["apiVersion"];
    if (!api) {
      Error(root, absl::StrCat("missing apiVersion (", kApiVersion, ")"));
    } else if (Scalar(api, "apiVersion", &s) && s != kApiVersion) {
      Error(api, absl::StrCat("apiVersion must be ", kApiVersion, ", got '", s,
                              "'"));
    }
    const YAML::Node kind = root["kind"];
    if (!kind) {
      Error(root, absl::StrCat("missing kind (", kKind, ")"));
    } else if (Scalar(kind, "kind", &s) && s != kKind) {
      Error(kind, absl::StrCat("kind must be ", kKind, ", got '", s, "'"));
    }
    if (const YAML::Node meta = root["metadata"]) {
      if (!meta.IsMap()) {
        Error(meta,
              absl::StrCat("metadata must be a map, got ", YamlType(meta)));
      } else {
        CheckKeys(meta, "metadata", {"name", "labels", "annotations"});
        if (const YAML::Node name = meta["name"]) {
          Scalar(name, "metadata.name", &cfg.name);
        }
      }
    }
    const YAML::Node spec = root["spec"];
    if (!spec) {
      Error(root, "missing spec");
      return;
    }
    if (!spec.IsMap()) {
      Error(spec, absl::StrCat("spec must be a map, got ", YamlType(spec)));
      return;
    }
    CheckKeys(spec, "spec", {"nodes"});
    const YAML::Node nodes = spec["nodes"];
    if (!nodes) {
      Error(spec, "missing spec.nodes");
      return;
    }
    if (!nodes.IsSequence() || nodes.size() == 0) {
      Error(nodes, absl::StrCat(
                       "spec.nodes must be a non-empty list, got ",
                       nodes.IsSequence() ? "an empty list" : YamlType(nodes)));
      return;
    }
    for (const YAML::Node& n : nodes) ParseNode(n, cfg);
    // Names must be unique after expansion.
    std::map<std::string, int> first_line;
    for (const NodeConfig& n : cfg.nodes) {
      auto [it, inserted] = first_line.emplace(n.name, n.line);
      if (!inserted) {
        YAML::Mark mark;
        mark.line = n.line - 1;
        Error(mark, absl::StrCat("node '", n.name,
                                 "' is declared twice (first at line ",
                                 it->second, ")"));
      }
    }
  }

  void ParseNode(const YAML::Node& n, InventoryConfig& cfg) {
    if (!n.IsMap()) {
      Error(n, absl::StrCat("a node must be a map, got ", YamlType(n)));
      return;
    }
    CheckKeys(n, "node",
              {"name", "count", "cpu", "cpu_milli", "memory", "memory_mib",
               "labels", "simulated", "gpus"});
    NodeConfig node;
    node.line = n.Mark().line + 1;
    bool ok = true;
    std::string name;
    if (const YAML::Node v = n["name"]) {
      if (Scalar(v, "name", &name) && !ValidName(name)) {
        Error(v, absl::StrCat("name '", name,
                              "' must be letters, digits, '.', '_' or '-'"));
        ok = false;
      }
    } else {
      Error(n, "node: missing name");
      ok = false;
    }
    const std::string where =
        name.empty() ? std::string("node") : absl::StrCat("node '", name, "'");
    int64_t count = -1;
    if (const YAML::Node v = n["count"]) {
      ok = Int(v, "count", 1, kMaxNodeCount, &count) && ok;
    }
    ok = Amount(n, where, "cpu", "cpu_milli", &ParseCpuMilli, "\"96\"", false,
                &node.cpu_milli) &&
         ok;
    ok = Amount(n, where, "memory", "memory_mib", &ParseMemoryMib, "768Gi",
                false, &node.memory_mib) &&
         ok;
    if (const YAML::Node v = n["labels"]) {
      if (!v.IsMap()) {
        Error(v, absl::StrCat("labels must be a map, got ", YamlType(v)));
        ok = false;
      } else {
        for (auto it = v.begin(); it != v.end(); ++it) {
          std::string key, value;
          if (Scalar(it->first, "label key", &key) &&
              Scalar(it->second, "label value", &value)) {
            node.labels.emplace_back(key, value);
          } else {
            ok = false;
          }
        }
      }
    }
    if (const YAML::Node v = n["simulated"]) {
      ok = Bool(v, "simulated", &node.simulated) && ok;
    }
    if (const YAML::Node v = n["gpus"]) {
      GpuConfig gpus;
      if (ParseGpus(v, where, gpus)) {
        node.gpus = std::move(gpus);
      } else {
        ok = false;
      }
    }
    if (!ok) return;
    if (count < 0) {
      node.name = name;
      cfg.nodes.push_back(std::move(node));
      return;
    }
    for (int64_t i = 0; i < count; ++i) {
      NodeConfig copy = node;
      copy.name = absl::StrCat(name, "-", i);
      cfg.nodes.push_back(std::move(copy));
    }
  }

  bool ParseGpus(const YAML::Node& g, absl::string_view where,
                 GpuConfig& gpus) {
    if (!g.IsMap()) {
      Error(g, absl::StrCat("gpus must be a map, got ", YamlType(g)));
      return false;
    }
    CheckKeys(g, "gpus",
              {"model", "count", "memory", "memory_mib", "mig", "nvlink"});
    bool ok = true;
    if (const YAML::Node v = g["model"]) {
      gpus.line = v.Mark().line + 1;
      ok = Scalar(v, "gpus.model", &gpus.model) && ok;
      if (ok && gpus.model.empty()) {
        Error(v, "gpus.model is empty");
        ok = false;
      }
    } else {
      Error(g, absl::StrCat(where, ": gpus: missing model"));
      ok = false;
    }
    int64_t count = 0;
    if (const YAML::Node v = g["count"]) {
      ok = Int(v, "gpus.count", 1, kMaxGpusPerNode, &count) && ok;
    } else {
      Error(g, absl::StrCat(where, ": gpus: missing count"));
      ok = false;
    }
    gpus.count = static_cast<int>(count);
    int64_t memory = 0;
    if (Amount(g, absl::StrCat(where, ": gpus"), "memory", "memory_mib",
               &ParseMemoryMib, "80Gi", true, &memory)) {
      gpus.memory_mib = memory;
    } else if (g["memory"] || g["memory_mib"]) {
      ok = false;
    }
    if (const YAML::Node v = g["mig"]) {
      bool mig = false;
      if (Bool(v, "gpus.mig", &mig)) {
        gpus.mig = mig;
      } else {
        ok = false;
      }
    }
    if (const YAML::Node v = g["nvlink"]) {
      if (count > 0) {
        ok = ParseNvLink(v, static_cast<int>(count), gpus.nvlink_group) && ok;
      }
    }
    return ok;
  }

  bool ParseNvLink(const YAML::Node& v, int count, std::vector<int>& group) {
    if (v.IsScalar()) {
      const std::string s = absl::AsciiStrToLower(v.Scalar());
      if (s == "none") {
        group.clear();
        return true;
      }
      if (s == "all") {
        group.assign(count, 0);
        return true;
      }
      int size = 0;
      if (absl::StartsWith(s, "groups-of-") &&
          absl::SimpleAtoi(absl::string_view(s).substr(10), &size) &&
          size > 0) {
        if (count % size != 0) {
          Error(v, absl::StrCat("nvlink: groups-of-", size, " does not divide ",
                                count, " GPUs"));
          return false;
        }
        group.resize(count);
        for (int i = 0; i < count; ++i) group[i] = i / size;
        return true;
      }
      Error(v,
            absl::StrCat("nvlink must be none, all, groups-of-N or a list of "
                         "GPU index lists, got '",
                         v.Scalar(), "'"));
      return false;
    }
    if (!v.IsSequence()) {
      Error(v, absl::StrCat("nvlink must be none, all, groups-of-N or a list "
                            "of GPU index lists, got ",
                            YamlType(v)));
      return false;
    }
    std::vector<int> g(count, -1);
    int next = 0;
    bool ok = true;
    for (const YAML::Node& domain : v) {
      if (!domain.IsSequence()) {
        Error(domain, absl::StrCat("nvlink: each domain must be a list of GPU "
                                   "indexes, got ",
                                   YamlType(domain)));
        ok = false;
        continue;
      }
      for (const YAML::Node& idx : domain) {
        int64_t i = 0;
        if (!Int(idx, "nvlink GPU index", 0, count - 1, &i)) {
          ok = false;
        } else if (g[i] >= 0) {
          Error(idx, absl::StrCat("nvlink: GPU ", i, " is in two domains"));
          ok = false;
        } else {
          g[i] = next;
        }
      }
      ++next;
    }
    if (!ok) return false;
    for (int& x : g) {
      if (x < 0) x = next++;  // unlisted GPUs stand alone
    }
    group = std::move(g);
    return true;
  }
};

}  // namespace

absl::StatusOr<InventoryConfig> ParseInventoryYaml(absl::string_view text,
                                                   std::string source) {
  return Parser(std::move(source)).Parse(text);
}

absl::StatusOr<InventoryConfig> LoadInventoryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return ParseInventoryYaml(buf.str(), path);
}

}  // namespace gpusched::config
