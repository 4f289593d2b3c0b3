#include "backends/slurm/slurm_nodes.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "inventory/cluster_state.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

// A token that starts a field: a letter, then letters, digits or "_/:.",
// then "=".
bool StartsField(absl::string_view token) {
  size_t eq = token.find('=');
  if (eq == absl::string_view::npos || eq == 0) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(token[0]))) return false;
  for (size_t i = 1; i < eq; ++i) {
    const char c = token[i];
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '/' && c != ':' && c != '.') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<int64_t> Int(const SlurmRecord& r, absl::string_view key,
                            absl::string_view what) {
  absl::string_view v = SlurmField(r, key);
  int64_t out = 0;
  if (!absl::SimpleAtoi(v, &out) || out < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", key, " is '", v, "', not a non-negative integer"));
  }
  return out;
}

// Records of `text` whose first field is `first_key`; other lines
// ("No jobs in the system", blank ones) are skipped.
absl::StatusOr<std::vector<SlurmRecord>> Records(
    absl::string_view text, absl::string_view first_key,
    absl::string_view rest_key = "") {
  std::vector<SlurmRecord> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::StartsWith(line, absl::StrCat(first_key, "="))) continue;
    if (line.size() > kMaxSlurmLine) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", first_key, " record of ", line.size(),
                       " bytes is longer than the bound of ", kMaxSlurmLine));
    }
    if (out.size() >= static_cast<size_t>(kMaxSlurmRecords)) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kMaxSlurmRecords, " ", first_key,
                       " records (the bound)"));
    }
    out.push_back(ParseSlurmRecord(line, rest_key));
  }
  return out;
}

// Placeable base states; any of the flags makes a node unusable.
bool UsableState(absl::string_view state) {
  if (state.empty() || absl::EndsWith(state, "*")) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(state, '+');
  const absl::string_view base = parts[0];
  if (base != "IDLE" && base != "MIXED" && base != "ALLOCATED" &&
      base != "ALLOC" && base != "MIX") {
    return false;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view f = parts[i];
    if (f == "DRAIN" || f == "DRAINING" || f == "DRAINED" || f == "FAIL" ||
        f == "MAINT" || f == "NOT_RESPONDING" || f == "REBOOT_REQUESTED" ||
        f == "REBOOT_ISSUED" || f == "RESERVED" || f == "INVALID_REG" ||
        absl::StartsWith(f, "POWER")) {
      return false;
    }
  }
  return true;
}

// "<digits>g.<digits>gb", optionally "+me".
bool IsMigProfileName(absl::string_view s) {
  absl::ConsumeSuffix(&s, "+me");
  auto digits = [&s]() {
    size_t n = 0;
    while (n < s.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(s[n])))
      ++n;
    s.remove_prefix(n);
    return n > 0;
  };
  return digits() && absl::ConsumePrefix(&s, "g.") && digits() && s == "gb";
}

}  // namespace

std::string SlurmMigProfile(absl::string_view gres_type) {
  std::string t = absl::AsciiStrToLower(gres_type);
  absl::string_view last = t;
  if (size_t u = last.rfind('_'); u != absl::string_view::npos) {
    last.remove_prefix(u + 1);
  }
  return IsMigProfileName(last) ? std::string(last) : std::string();
}

SlurmRecord ParseSlurmRecord(absl::string_view line,
                             absl::string_view rest_key) {
  SlurmRecord out;
  std::vector<absl::string_view> tokens =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const absl::string_view t = tokens[i];
    if (!StartsField(t)) {
      // Part of the previous value ("OS=Linux 6.1 #1 SMP").
      if (!out.empty()) absl::StrAppend(&out.back().second, " ", t);
      continue;
    }
    const size_t eq = t.find('=');
    out.emplace_back(std::string(t.substr(0, eq)),
                     std::string(t.substr(eq + 1)));
    if (!rest_key.empty() && out.back().first == rest_key) {
      // Free text to the end of the line, whatever it holds.
      const size_t at = static_cast<size_t>(t.data() - line.data()) + eq + 1;
      out.back().second = std::string(line.substr(at));
      break;
    }
  }
  return out;
}

absl::string_view SlurmField(const SlurmRecord& record, absl::string_view key) {
  for (const auto& [k, v] : record) {
    if (k == key) return v;
  }
  return {};
}

absl::StatusOr<std::vector<int>> ParseSlurmIndexList(absl::string_view text) {
  std::set<int> out;
  if (text.empty() || text == "N/A") return std::vector<int>{};
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    int lo = 0, hi = 0;
    if (!absl::SimpleAtoi(range.first, &lo) ||
        !absl::SimpleAtoi(range.second.empty() ? range.first : range.second,
                          &hi) ||
        lo < 0 || hi < lo || hi > kMaxSlurmGresIndex) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU index list '", text, "': '", part,
          "' is not an index or range within 0..", kMaxSlurmGresIndex));
    }
    for (int i = lo; i <= hi; ++i) out.insert(i);
  }
  return std::vector<int>(out.begin(), out.end());
}

absl::StatusOr<std::vector<SlurmGres>> ParseSlurmGres(absl::string_view text) {
  std::vector<SlurmGres> out;
  if (text.empty() || text == "(null)" || text == "N/A") return out;
  // Split on commas outside parentheses ("gpu:2(S:0,2),shard:4").
  std::vector<absl::string_view> entries;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      entries.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '(') {
      ++depth;
    } else if (text[i] == ')') {
      --depth;
    }
  }
  if (entries.size() > static_cast<size_t>(kMaxSlurmGresEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GRES '", text.substr(0, 200), "': more than ",
                     kMaxSlurmGresEntries, " entries (the bound)"));
  }
  for (absl::string_view e : entries) {
    absl::string_view head = e, extra;
    if (size_t p = e.find('('); p != absl::string_view::npos) {
      head = e.substr(0, p);
      extra = e.substr(p + 1);
      if (!absl::ConsumeSuffix(&extra, ")")) {
        return absl::InvalidArgumentError(
            absl::StrCat("GRES entry '", e, "': unbalanced parentheses"));
      }
    }
    std::vector<absl::string_view> parts = absl::StrSplit(head, ':');
    SlurmGres g;
    g.name = std::string(parts[0]);
    // name[:type][:count]; a missing count is 1.
    absl::string_view count = "1";
    if (parts.size() == 2) {
      int64_t n = 0;
      if (absl::SimpleAtoi(parts[1], &n)) {
        count = parts[1];
      } else {
        g.type = std::string(parts[1]);
      }
    } else if (parts.size() == 3) {
      g.type = std::string(parts[1]);
      count = parts[2];
    } else if (parts.size() > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("GRES entry '", e, "': expected name[:type][:count]"));
    }
    if (g.name.empty() || !absl::SimpleAtoi(count, &g.count) || g.count < 0 ||
        g.count > kMaxSlurmGresCount) {
      return absl::InvalidArgumentError(
          absl::StrCat("GRES entry '", e, "': the count is not within 0..",
                       kMaxSlurmGresCount));
    }
    // "(IDX:0-1)", "(S:0-1)", "(IDX:0,2-3)"; only IDX matters here.
    if (absl::ConsumePrefix(&extra, "IDX:")) {
      ASSIGN_OR_RETURN(g.indexes, ParseSlurmIndexList(extra));
    }
    out.push_back(std::move(g));
  }
  return out;
}

absl::StatusOr<std::vector<SlurmNode>> ParseSlurmNodes(absl::string_view text) {
  ASSIGN_OR_RETURN(std::vector<SlurmRecord> records,
                   Records(text, "NodeName", "Reason"));
  std::vector<SlurmNode> out;
  for (const SlurmRecord& r : records) {
    SlurmNode n;
    n.name = std::string(SlurmField(r, "NodeName"));
    const std::string what = absl::StrCat("Slurm node '", n.name, "'");
    n.address = std::string(SlurmField(r, "NodeAddr"));
    if (n.address.empty()) n.address = n.name;
    n.state = std::string(SlurmField(r, "State"));
    n.usable = UsableState(n.state);
    ASSIGN_OR_RETURN(n.cpus, Int(r, "CPUTot", what));
    ASSIGN_OR_RETURN(n.cpus_allocated, Int(r, "CPUAlloc", what));
    ASSIGN_OR_RETURN(n.memory_mib, Int(r, "RealMemory", what));
    ASSIGN_OR_RETURN(n.memory_allocated_mib, Int(r, "AllocMem", what));
    absl::StatusOr<std::vector<SlurmGres>> gres =
        ParseSlurmGres(SlurmField(r, "Gres"));
    if (!gres.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": Gres: ", gres.status().message()));
    }
    bool typed = false;
    int64_t indexes = 0;  // Slurm's GPU index space: every gpu GRES
    for (const SlurmGres& g : *gres) {
      if (g.name == "shard") n.shards += g.count;
      if (g.name != "gpu") continue;
      if (indexes + g.count > kMaxSlurmGresIndex + 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": more than ", kMaxSlurmGresIndex + 1,
                         " GPUs and MIG devices (the bound)"));
      }
      SlurmGpuBlock block{.type = g.type,
                          .mig_profile = SlurmMigProfile(g.type),
                          .first = static_cast<int>(indexes),
                          .count = static_cast<int>(g.count)};
      indexes += g.count;
      if (block.mig_profile.empty()) {
        if (typed && g.type != n.gpu_type) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": GPUs of two GRES types (", n.gpu_type, ", ", g.type,
              "); gpusched places onto one GPU model per node"));
        }
        typed = true;
        n.gpu_type = g.type;
        n.gpus += static_cast<int>(g.count);
      }
      n.gpu_blocks.push_back(std::move(block));
    }
    absl::StatusOr<std::vector<SlurmGres>> used =
        ParseSlurmGres(SlurmField(r, "GresUsed"));
    if (!used.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GresUsed: ", used.status().message()));
    }
    std::set<int> taken;
    for (const SlurmGres& g : *used) {
      // A shard's index is its GPU's (gres.conf declares shards per File).
      if (g.name != "gpu" && g.name != "shard") continue;
      for (int i : g.indexes) {
        if (i < indexes) taken.insert(i);
      }
    }
    n.gpus_used.assign(taken.begin(), taken.end());
    for (absl::string_view p :
         absl::StrSplit(SlurmField(r, "Partitions"), ',', absl::SkipEmpty())) {
      n.partitions.emplace_back(p);
    }
    const absl::string_view features = SlurmField(r, "AvailableFeatures");
    if (features != "(null)") {
      for (absl::string_view f :
           absl::StrSplit(features, ',', absl::SkipEmpty())) {
        if (n.features.size() >= static_cast<size_t>(kMaxSlurmFeatures)) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": more than ", kMaxSlurmFeatures,
                           " features (the bound)"));
        }
        n.features.emplace_back(f);
      }
    }
    n.reason = std::string(SlurmField(r, "Reason"));
    out.push_back(std::move(n));
  }
  return out;
}

absl::StatusOr<std::vector<SlurmJob>> ParseSlurmJobs(absl::string_view text) {
  ASSIGN_OR_RETURN(std::vector<SlurmRecord> records, Records(text, "JobId"));
  std::vector<SlurmJob> out;
  for (const SlurmRecord& r : records) {
    SlurmJob j;
    const absl::string_view id = SlurmField(r, "JobId");
    if (!absl::SimpleAtoi(id, &j.id) || j.id <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Slurm job: JobId '", id, "' is not a job number"));
    }
    j.name = std::string(SlurmField(r, "JobName"));
    absl::string_view user = SlurmField(r, "UserId");
    j.user = std::string(user.substr(0, user.find('(')));
    j.state = std::string(SlurmField(r, "JobState"));
    j.reason = std::string(SlurmField(r, "Reason"));
    j.comment = std::string(SlurmField(r, "Comment"));
    if (j.comment == "(null)") j.comment.clear();
    j.partition = std::string(SlurmField(r, "Partition"));
    absl::string_view node = SlurmField(r, "BatchHost");
    if (node.empty() || node == "(null)") node = SlurmField(r, "NodeList");
    if (node != "(null)") j.node = std::string(node);
    // ExitCode=<code>:<signal>
    std::pair<absl::string_view, absl::string_view> exit =
        absl::StrSplit(SlurmField(r, "ExitCode"), absl::MaxSplits(':', 1));
    (void)absl::SimpleAtoi(exit.first, &j.exit_code);
    (void)absl::SimpleAtoi(exit.second, &j.exit_signal);
    absl::StatusOr<std::vector<SlurmGres>> gres =
        ParseSlurmGres(SlurmField(r, "GRES"));
    if (!gres.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Slurm job ", j.id, ": GRES: ", gres.status().message()));
    }
    for (const SlurmGres& g : *gres) {
      if (g.name == "shard") j.shards += g.count;
      if (g.name == "gpu" || g.name == "shard") {
        j.gpus.insert(j.gpus.end(), g.indexes.begin(), g.indexes.end());
      }
    }
    std::sort(j.gpus.begin(), j.gpus.end());
    j.gpus.erase(std::unique(j.gpus.begin(), j.gpus.end()), j.gpus.end());
    out.push_back(std::move(j));
  }
  return out;
}

bool SlurmJobFinished(absl::string_view state) {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" ||
         state == "NODE_FAIL" || state == "PREEMPTED" || state == "TIMEOUT" ||
         state == "OUT_OF_MEMORY" || state == "BOOT_FAIL" ||
         state == "DEADLINE" || state == "SPECIAL_EXIT";
}

absl::StatusOr<std::vector<inventory::NodeSpec>> SlurmNodeSpecs(
    const std::vector<SlurmNode>& nodes,
    const absl::flat_hash_map<std::string, std::string>& gres_map,
    const inventory::GpuCatalog& catalog) {
  std::vector<inventory::NodeSpec> out;
  std::vector<std::string> problems;
  for (const SlurmNode& n : nodes) {
    inventory::NodeSpec spec;
    spec.name = n.name;
    spec.cpu_milli = n.cpus * 1000;
    spec.memory_mib = n.memory_mib;
    spec.simulated = false;
    spec.address = n.address;
    if (!n.partitions.empty()) {
      spec.labels.emplace_back("slurm.partitions",
                               absl::StrJoin(n.partitions, ","));
    }
    const std::string what = absl::StrCat("Slurm node '", n.name, "'");
    const inventory::GpuModelSpec* model = nullptr;
    if (n.gpus > 0) {
      model = catalog.FindMapped(n.gpu_type, gres_map);
      if (model == nullptr) {
        problems.push_back(absl::StrCat(
            what, ": GRES GPU type '", n.gpu_type,
            "' is not a known GPU model; map it in slurm.gresMap (",
            n.gpu_type.empty() ? "untyped GRES need a type" : n.gpu_type,
            ": <model>) to one of: ", absl::StrJoin(catalog.Names(), ", ")));
        continue;
      }
    }
    // MIG devices: their model, then their layout.
    std::vector<std::pair<std::string, int>> mig;
    std::string problem;
    for (const SlurmGpuBlock& b : n.gpu_blocks) {
      if (b.mig_profile.empty() || b.count == 0) continue;
      mig.emplace_back(b.mig_profile, b.count);
      // slurm.gresMap for the MIG type, else the model the type's prefix
      // names, else the whole GPUs'.
      const inventory::GpuModelSpec* m = catalog.FindMapped(b.type, gres_map);
      if (size_t u = b.type.rfind('_');
          m == nullptr && u != std::string::npos) {
        m = catalog.FindMapped(b.type.substr(0, u), gres_map);
      }
      if (m == nullptr) m = model;
      if (m == nullptr) {
        problem = absl::StrCat(
            what, ": MIG GRES type '", b.type,
            "' names no GPU model (the node has no whole GPUs to take it "
            "from); map it in slurm.gresMap (",
            b.type,
            ": <model>) to one of: ", absl::StrJoin(catalog.Names(), ", "));
        break;
      }
      if (model != nullptr && m != model) {
        problem = absl::StrCat(what, ": MIG GRES type '", b.type, "' is on ",
                               m->name, ", its whole GPUs are ", model->name,
                               "; gpusched places onto one GPU model per node");
        break;
      }
      model = m;
    }
    if (!problem.empty()) {
      problems.push_back(std::move(problem));
      continue;
    }
    if (n.gpus > inventory::ClusterState::kMaxGpusPerNode) {
      problems.push_back(absl::StrCat(
          what, ": ", n.gpus,
          " whole GPUs in its GRES; gpusched places "
          "onto at most ",
          inventory::ClusterState::kMaxGpusPerNode, " GPUs per node"));
      continue;
    }
    if (model != nullptr) {
      spec.gpu_model = model->name;
      spec.gpu_count = n.gpus;
      spec.gpu_memory_mib = model->memory_mib;
      // Whole GPUs are whole: gpusched lays out no MIG slices on them.
      spec.mig_slots = 0;
      // (A model without MIG, an L4, has no layout to add.)
      if (absl::Status st =
              mig.empty() ? absl::OkStatus()
                          : inventory::AddStaticMigGpus(spec, *model, mig);
          !st.ok()) {
        problems.push_back(
            absl::StrCat(what, ": its MIG devices: ", st.message()));
        continue;
      }
    }
    out.push_back(std::move(spec));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  return out;
}

std::optional<SlurmGpuSpot> LocateSlurmGpu(const SlurmNode& node,
                                           const inventory::NodeSpec& spec,
                                           int index) {
  int whole = 0;  // whole GPUs before this block
  for (const SlurmGpuBlock& b : node.gpu_blocks) {
    if (index < b.first || index >= b.first + b.count) {
      if (b.mig_profile.empty()) whole += b.count;
      continue;
    }
    const int k = index - b.first;
    if (b.mig_profile.empty()) {
      if (whole + k >= node.gpus || whole + k >= spec.gpu_count) {
        return std::nullopt;
      }
      return SlurmGpuSpot{.gpu = whole + k, .mig_start = -1, .mig_profile = ""};
    }
    const std::vector<std::pair<int, int>> slices =
        inventory::StaticMigSlices(spec, b.mig_profile);
    // Devices of one profile in several blocks (two spellings of one
    // profile) follow each other.
    int before = 0;
    for (const SlurmGpuBlock& o : node.gpu_blocks) {
      if (&o == &b) break;
      if (o.mig_profile == b.mig_profile) before += o.count;
    }
    if (before + k >= static_cast<int>(slices.size())) return std::nullopt;
    SlurmGpuSpot spot;
    spot.gpu = slices[before + k].first;
    spot.mig_start = slices[before + k].second;
    for (const inventory::MigInstance& m : spec.mig_instances[spot.gpu]) {
      if (m.start == spot.mig_start) spot.mig_profile = m.profile;
    }
    return spot;
  }
  return std::nullopt;
}

std::string SlurmMigType(const SlurmNode& node, absl::string_view profile) {
  const std::string want = absl::AsciiStrToLower(profile);
  for (const SlurmGpuBlock& b : node.gpu_blocks) {
    if (!b.mig_profile.empty() && b.mig_profile == want && b.count > 0) {
      return b.type;
    }
  }
  return "";
}

}  // namespace gpusched::backends
