#include "backends/slurm/slurm_launcher.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "backends/command.h"
#include "backends/slurm/slurm_pools.h"

namespace gpusched::backends {
namespace {

class SystemClient : public SlurmClient {
 public:
  SystemClient(std::string bin_dir, Micros timeout)
      : bin_dir_(std::move(bin_dir)), timeout_(timeout) {}
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv,
                                  const std::string& input) override {
    std::vector<std::string> full = argv;
    if (!bin_dir_.empty()) full[0] = absl::StrCat(bin_dir_, "/", argv[0]);
    return RunCommandOk(full, input, timeout_);
  }

 private:
  std::string bin_dir_;
  Micros timeout_;
};

// One word for /bin/sh: single-quoted, a quote written as '\''.
std::string Quote(absl::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

bool EnvName(absl::string_view k) {
  if (k.empty() || absl::ascii_isdigit(static_cast<unsigned char>(k[0]))) {
    return false;
  }
  for (char c : k) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

// Set by Slurm for the GPUs it gave the job; gpusched's own would be wrong
// whenever Slurm picked other indexes.
bool SlurmOwned(absl::string_view k) {
  return k == "CUDA_VISIBLE_DEVICES" || k == "NVIDIA_VISIBLE_DEVICES" ||
         k == "ROCR_VISIBLE_DEVICES" || k == "GPU_DEVICE_ORDINAL";
}

std::string JobText(const backends::SlurmJob& j) {
  return absl::StrCat("Slurm job ", j.id, " (", j.name, ") ", j.state,
                      j.node.empty() ? "" : absl::StrCat(" on ", j.node),
                      j.reason.empty() || j.reason == "None"
                          ? ""
                          : absl::StrCat(": ", j.reason));
}

}  // namespace

std::unique_ptr<SlurmClient> SystemSlurmClient(std::string bin_dir,
                                               Micros timeout) {
  return std::make_unique<SystemClient>(std::move(bin_dir), timeout);
}

absl::StatusOr<std::vector<backends::SlurmNode>> ReadSlurmNodes(
    SlurmClient& client) {
  absl::StatusOr<std::string> text =
      client.Run({"scontrol", "show", "node", "-d", "--oneliner"}, "");
  if (!text.ok()) return text.status();
  return backends::ParseSlurmNodes(*text);
}

absl::StatusOr<std::vector<backends::SlurmJob>> ReadSlurmJobs(
    SlurmClient& client) {
  absl::StatusOr<std::string> text =
      client.Run({"scontrol", "show", "job", "-d", "--oneliner"}, "");
  if (!text.ok()) return text.status();
  return backends::ParseSlurmJobs(*text);
}

SlurmLauncher::SlurmLauncher(SlurmLauncherOptions options,
                             std::unique_ptr<SlurmClient> client,
                             std::vector<backends::SlurmNode> nodes,
                             std::vector<inventory::NodeSpec> specs,
                             const Clock* clock)
    : options_(std::move(options)), client_(std::move(client)), clock_(clock) {
  absl::StatusOr<std::vector<PoolReport>> pools = backends::SlurmPools(nodes);
  if (pools.ok()) {
    pools_ = *std::move(pools);
  } else {
    pool_error_ = std::string(pools.status().message());
  }
  for (const PoolReport& p : pools_) {
    for (const std::string& n : p.nodes) pool_of_[n] = p.pool;
  }
  for (const backends::SlurmNode& n : nodes) {
    if (!pool_of_.contains(n.name)) continue;
    backends::SlurmPoolNodeState st =
        backends::SlurmPoolState(n.state, n.reason);
    SetPoolNode(n.name, st.state, std::move(st.reason));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    backends::SlurmNode& n = nodes[i];
    NodeGres g;
    g.shards_per_gpu = n.gpus > 0 ? n.shards / n.gpus : 0;
    if (i < specs.size()) g.spec = std::move(specs[i]);
    g.node = std::move(n);
    gres_[g.node.name] = std::move(g);
  }
}

void SlurmLauncher::Locate(const NodeGres& node,
                           const std::vector<int>& indexes,
                           std::vector<int>* gpus,
                           std::vector<int>* mig_starts) const {
  std::vector<std::pair<int, int>> spots;
  for (int i : indexes) {
    std::optional<backends::SlurmGpuSpot> s =
        backends::LocateSlurmGpu(node.node, node.spec, i);
    if (s.has_value()) spots.emplace_back(s->gpu, s->mig_start);
  }
  std::sort(spots.begin(), spots.end());
  const bool mig = std::any_of(spots.begin(), spots.end(),
                               [](const auto& s) { return s.second >= 0; });
  for (const auto& [gpu, start] : spots) {
    gpus->push_back(gpu);
    if (mig) mig_starts->push_back(start);
  }
}

int64_t SlurmLauncher::Shards(double share, int64_t shards_per_gpu) {
  // The epsilon keeps 0.25 x 100 at 25 whatever the rounding of 0.25.
  const auto n = static_cast<int64_t>(
      std::floor(share * static_cast<double>(shards_per_gpu) + 1e-6));
  return std::clamp<int64_t>(n, 1, std::max<int64_t>(1, shards_per_gpu));
}

std::string SlurmLauncher::Script(const ProcessSpec& spec) {
  std::string s = absl::StrCat("#!/bin/sh\n# gpusched replica ", spec.name,
                               " (", spec.placement.deployment, ")\n");
  std::vector<std::pair<std::string, std::string>> env(spec.env.begin(),
                                                       spec.env.end());
  std::sort(env.begin(), env.end());
  for (const auto& [k, v] : env) {
    if (SlurmOwned(k)) continue;
    absl::StrAppend(&s, "export ", k, "=", Quote(v), "\n");
  }
  if (!spec.cwd.empty())
    absl::StrAppend(&s, "cd ", Quote(spec.cwd), " || exit 1\n");
  s += "exec";
  for (const std::string& a : spec.argv) absl::StrAppend(&s, " ", Quote(a));
  s += "\n";
  return s;
}

absl::StatusOr<ProcessId> SlurmLauncher::Start(const ProcessSpec& spec) {
  const ProcessPlacement& p = spec.placement;
  if (spec.argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", spec.name, ": no command"));
  }
  if (p.node.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", spec.name,
        " has no node: on Slurm every replica runs on a node placement "
        "chose (give its deployment resources)"));
  }
  auto gres = gres_.find(p.node);
  if (gres == gres_.end()) {
    return absl::NotFoundError(absl::StrCat("replica ", spec.name, ": node ",
                                            p.node, " is not a Slurm node"));
  }
  std::string mig_type;
  if (!p.mig_profile.empty()) {
    mig_type = backends::SlurmMigType(gres->second.node, p.mig_profile);
    if (mig_type.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", spec.name, ": node ", p.node,
                       " has no MIG devices of profile ", p.mig_profile,
                       " in its GRES (docs/slurm.md)"));
    }
  } else if (p.fraction && gres->second.shards_per_gpu <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", spec.name, ": node ", p.node,
        " declares no gres/shard, which GPU fractions run on through Slurm "
        "(docs/slurm.md); give its GPUs shards in gres.conf or use whole "
        "GPUs"));
  }
  for (const std::string& word : {spec.name, p.deployment, spec.tag}) {
    if (word.find_first_of(" ,'\"\\:/=\n\t") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica ", spec.name, ": '", word,
                       "' cannot go into a Slurm job name or comment"));
    }
  }
  for (const auto& [k, v] : spec.env) {
    if (!EnvName(k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica ", spec.name, ": environment variable name '",
                       k, "' is not a shell name"));
    }
  }
  std::vector<std::string> argv = {
      "sbatch",
      "--parsable",
      absl::StrCat("--job-name=", options_.job_prefix, ".", spec.name),
      absl::StrCat("--comment=", Comment(p.deployment, spec.name, spec.tag)),
      "--nodes=1",
      "--ntasks=1",
      absl::StrCat("--nodelist=", p.node),
      absl::StrCat("--cpus-per-task=",
                   std::max<int64_t>(1, (p.cpu_milli + 999) / 1000)),
      absl::StrCat(
          "--mem=",
          p.memory_mib > 0 ? p.memory_mib : options_.default_memory_mib, "M"),
      "--no-requeue",
      "--open-mode=append"};
  if (!mig_type.empty()) {
    // Slurm gives the job one device of the type and says which.
    argv.push_back(absl::StrCat("--gres=gpu:", mig_type, ":1"));
  } else if (p.fraction) {
    argv.push_back(absl::StrCat(
        "--gres=shard:", Shards(p.gpu_share, gres->second.shards_per_gpu)));
  } else if (!p.gpus.empty()) {
    const std::string& type = gres->second.node.gpu_type;
    argv.push_back(
        absl::StrCat("--gres=gpu:", type.empty() ? "" : absl::StrCat(type, ":"),
                     p.gpus.size()));
  }
  if (!spec.inherit_env) argv.push_back("--export=NONE");
  if (!options_.partition.empty()) {
    argv.push_back(absl::StrCat("--partition=", options_.partition));
  }
  if (!options_.account.empty()) {
    argv.push_back(absl::StrCat("--account=", options_.account));
  }
  if (!options_.qos.empty())
    argv.push_back(absl::StrCat("--qos=", options_.qos));
  std::string out = "/dev/null", err = "/dev/null";
  if (!spec.log_dir.empty()) {
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::absolute(spec.log_dir, ec);
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create log directory ", spec.log_dir, ": ", ec.message()));
    }
    out = (dir / absl::StrCat(spec.name, ".out")).string();
    err = (dir / absl::StrCat(spec.name, ".err")).string();
  }
  argv.push_back(absl::StrCat("--output=", out));
  argv.push_back(absl::StrCat("--error=", err));
  absl::StatusOr<std::string> submitted = client_->Run(argv, Script(spec));
  if (!submitted.ok()) {
    return absl::Status(submitted.status().code(),
                        absl::StrCat("sbatch for replica ", spec.name, ": ",
                                     submitted.status().message()));
  }
  // "<id>" or "<id>;<cluster>".
  absl::string_view text = absl::StripAsciiWhitespace(*submitted);
  text = text.substr(0, text.find(';'));
  ProcessId id = 0;
  if (!absl::SimpleAtoi(text, &id) || id <= 0) {
    return absl::InternalError(
        absl::StrCat("sbatch for replica ", spec.name, " printed '",
                     absl::StripAsciiWhitespace(*submitted).substr(0, 200),
                     "', not a job id"));
  }
  jobs_[id] = Job{.name = spec.name, .node = p.node};
  return id;
}

bool SlurmLauncher::Ours(const backends::SlurmJob& j) const {
  return absl::StartsWith(j.name, absl::StrCat(options_.job_prefix, "."));
}

void SlurmLauncher::Refresh(bool force) {
  const Micros now = clock_->Now();
  if (!force && queried_ && now - last_refresh_ < options_.poll_interval) {
    return;
  }
  queried_ = true;
  last_refresh_ = now;
  absl::StatusOr<std::vector<backends::SlurmJob>> jobs =
      ReadSlurmJobs(*client_);
  if (!jobs.ok()) {
    // Slurm unreachable or confused: nothing is concluded from silence.
    QueryDone(std::string(jobs.status().message()));
    return;
  }
  absl::flat_hash_map<ProcessId, const backends::SlurmJob*> by_id;
  // GPUs held by this gpusched's jobs and by the other jobs it can see, per
  // node (a GPU shared through shards can be both).
  absl::flat_hash_map<std::string, std::set<int>> ours, others;
  for (const backends::SlurmJob& j : *jobs) {
    if (Ours(j)) by_id[j.id] = &j;
    if (!backends::SlurmJobFinished(j.state) && !j.node.empty()) {
      (Ours(j) ? ours : others)[j.node].insert(j.gpus.begin(), j.gpus.end());
    }
  }
  std::vector<ProcessId> ended;
  for (auto& [id, job] : jobs_) {
    auto it = by_id.find(id);
    ExitEvent e;
    e.id = id;
    e.name = job.name;
    e.stop_requested = job.stop_requested;
    if (it == by_id.end()) {
      e.signaled = true;
      e.signal = 9;
      e.reason = absl::StrCat("Slurm job ", id, " is no longer known to Slurm");
      exits_.push_back(std::move(e));
      ended.push_back(id);
      continue;
    }
    const backends::SlurmJob& j = *it->second;
    if (!j.node.empty()) job.node = j.node;
    if (backends::SlurmJobFinished(j.state)) {
      if (j.state == "COMPLETED" ||
          (j.state == "FAILED" && j.exit_signal == 0)) {
        e.exit_code = j.exit_code;
      } else {
        e.signaled = true;
        e.signal = j.exit_signal > 0 ? j.exit_signal : 9;
      }
      e.reason = JobText(j);
      exits_.push_back(std::move(e));
      ended.push_back(id);
    } else if (j.state == "RUNNING" && !job.running_reported) {
      job.running_reported = true;
      GpuAssignment a;
      a.id = id;
      a.node = j.node;
      if (auto g = gres_.find(j.node); g != gres_.end()) {
        Locate(g->second, j.gpus, &a.gpus, &a.mig_starts);
      }
      assignments_.push_back(std::move(a));
    }
  }
  for (ProcessId id : ended) jobs_.erase(id);
  std::sort(exits_.begin(), exits_.end(),
            [](const ExitEvent& a, const ExitEvent& b) { return a.id < b.id; });

  absl::StatusOr<std::vector<backends::SlurmNode>> nodes =
      ReadSlurmNodes(*client_);
  if (!nodes.ok()) {
    QueryDone(std::string(nodes.status().message()));
    return;
  }
  QueryDone("");
  for (const backends::SlurmNode& n : *nodes) {
    auto gres = gres_.find(n.name);
    if (gres == gres_.end()) continue;  // joined after the start
    if (pool_of_.contains(n.name)) {
      backends::SlurmPoolNodeState st =
          backends::SlurmPoolState(n.state, n.reason);
      SetPoolNode(n.name, st.state, std::move(st.reason));
    }
    gres->second.shards_per_gpu = n.gpus > 0 ? n.shards / n.gpus : 0;
    NodeReport r;
    r.node = n.name;
    r.usable = n.usable;
    r.state = n.state;
    r.reason = n.reason;
    const std::set<int>& mine = ours[n.name];
    std::set<int> foreign = others[n.name];
    for (int g : n.gpus_used) {
      if (!mine.contains(g)) foreign.insert(g);
    }
    for (int i : foreign) {
      std::optional<backends::SlurmGpuSpot> spot =
          backends::LocateSlurmGpu(gres->second.node, gres->second.spec, i);
      if (!spot.has_value()) continue;
      if (spot->mig_start >= 0) {
        r.foreign_mig.emplace_back(spot->gpu, spot->mig_start);
      } else {
        r.foreign_gpus.push_back(spot->gpu);
      }
    }
    std::sort(r.foreign_gpus.begin(), r.foreign_gpus.end());
    r.foreign_gpus.erase(
        std::unique(r.foreign_gpus.begin(), r.foreign_gpus.end()),
        r.foreign_gpus.end());
    std::sort(r.foreign_mig.begin(), r.foreign_mig.end());
    auto last = node_reports_.find(n.name);
    if (last == node_reports_.end() || last->second.usable != r.usable ||
        last->second.state != r.state ||
        last->second.foreign_gpus != r.foreign_gpus ||
        last->second.foreign_mig != r.foreign_mig) {
      changed_nodes_.push_back(r);
      node_reports_[n.name] = std::move(r);
    }
  }
}

void SlurmLauncher::QueryDone(std::string error) {
  // Only the changes: a Slurm that stays down is one report, not one per
  // poll.
  if (error.empty() != last_error_.empty()) {
    manager_reports_.push_back({error.empty(), error});
  }
  last_error_ = std::move(error);
}

std::vector<ManagerReport> SlurmLauncher::ManagerReports() {
  return std::exchange(manager_reports_, {});
}

std::vector<ExitEvent> SlurmLauncher::Poll() {
  return std::exchange(exits_, {});
}

std::vector<GpuAssignment> SlurmLauncher::Assignments() {
  return std::exchange(assignments_, {});
}

std::vector<NodeReport> SlurmLauncher::NodeReports() {
  return std::exchange(changed_nodes_, {});
}

absl::Status SlurmLauncher::Cancel(ProcessId id, const char* signal) {
  std::vector<std::string> argv = {"scancel", "--quiet"};
  if (signal != nullptr) {
    argv.push_back("--full");
    argv.push_back(absl::StrCat("--signal=", signal));
  }
  argv.push_back(absl::StrCat(id));
  absl::StatusOr<std::string> r = client_->Run(argv, "");
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status SlurmLauncher::Stop(ProcessId id, Micros grace, Micros now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no Slurm job ", id));
  }
  Job& job = it->second;
  if (job.stop_requested) return absl::OkStatus();
  job.stop_requested = true;
  job.kill_deadline = now + grace;
  // SIGTERM to the engine (the batch step execs it); a job that does not
  // run yet is simply cancelled.
  if (!Cancel(id, "TERM").ok()) return Cancel(id, nullptr);
  return absl::OkStatus();
}

absl::Status SlurmLauncher::Kill(ProcessId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no Slurm job ", id));
  }
  it->second.stop_requested = true;
  it->second.killed = true;
  (void)Cancel(id, "KILL");
  return Cancel(id, nullptr);
}

Micros SlurmLauncher::Tick(Micros now) {
  Micros next = queried_ ? last_refresh_ + options_.poll_interval : now;
  for (auto& [id, job] : jobs_) {
    if (!job.stop_requested || job.killed) continue;
    if (job.kill_deadline <= now) {
      job.killed = true;
      (void)Cancel(id, "KILL");
      (void)Cancel(id, nullptr);
    } else {
      next = std::min(next, job.kill_deadline);
    }
  }
  return next;
}

bool SlurmLauncher::IsAlive(ProcessId id) const { return jobs_.contains(id); }

std::string SlurmLauncher::Comment(const std::string& deployment,
                                   const std::string& name,
                                   const std::string& tag) const {
  return absl::StrCat(options_.job_prefix, ":", deployment, "/", name, ":",
                      tag);
}

std::vector<Leftover> SlurmLauncher::Leftovers() {
  std::vector<Leftover> out;
  absl::StatusOr<std::vector<backends::SlurmJob>> jobs =
      ReadSlurmJobs(*client_);
  if (!jobs.ok()) {
    QueryDone(std::string(jobs.status().message()));
    return out;
  }
  const std::string prefix = absl::StrCat(options_.job_prefix, ":");
  for (const backends::SlurmJob& j : *jobs) {
    if (!Ours(j) || backends::SlurmJobFinished(j.state) ||
        jobs_.contains(j.id)) {
      continue;
    }
    Leftover l;
    l.id = j.id;
    l.name = j.name.substr(options_.job_prefix.size() + 1);
    // "<prefix>:<deployment>/<replica>:<tag>"
    absl::string_view c = j.comment;
    if (absl::ConsumePrefix(&c, prefix)) {
      const size_t slash = c.find('/');
      const size_t colon = c.find(':', slash == c.npos ? 0 : slash);
      if (slash != c.npos && colon != c.npos) {
        l.deployment = std::string(c.substr(0, slash));
        l.tag = std::string(c.substr(colon + 1));
      }
    }
    l.running = j.state == "RUNNING";
    l.node = j.node;
    if (auto g = gres_.find(j.node); g != gres_.end()) {
      Locate(g->second, j.gpus, &l.gpus, &l.mig_starts);
    }
    l.description = JobText(j);
    out.push_back(std::move(l));
  }
  return out;
}

absl::Status SlurmLauncher::Adopt(const Leftover& leftover,
                                  const std::string& name,
                                  const std::string& deployment,
                                  const std::string& tag) {
  jobs_[leftover.id] =
      Job{.name = name, .node = leftover.node, .running_reported = true};
  if (name == leftover.name) return absl::OkStatus();
  // squeue names the replica it serves now.
  absl::StatusOr<std::string> r =
      client_->Run({"scontrol", "update", absl::StrCat("JobId=", leftover.id),
                    absl::StrCat("JobName=", options_.job_prefix, ".", name),
                    absl::StrCat("Comment=", Comment(deployment, name, tag))},
                   "");
  return r.ok() ? absl::OkStatus() : r.status();
}

void SlurmLauncher::SetPoolNode(const std::string& node, PoolNodeState state,
                                std::string reason) {
  auto it = pool_nodes_.find(node);
  if (it != pool_nodes_.end() && it->second.state == state &&
      it->second.reason == reason) {
    return;
  }
  PoolNodeReport r{.node = node,
                   .pool = pool_of_[node],
                   .state = state,
                   .reason = std::move(reason)};
  changed_pool_nodes_.push_back(r);
  pool_nodes_[node] = std::move(r);
}

std::vector<PoolNodeReport> SlurmLauncher::PoolNodeReports() {
  return std::exchange(changed_pool_nodes_, {});
}

absl::StatusOr<std::vector<std::string>> SlurmLauncher::AddNodes(
    const std::string& pool, int count, const std::string& request) {
  auto p = std::find_if(pools_.begin(), pools_.end(),
                        [&](const PoolReport& r) { return r.pool == pool; });
  if (p == pools_.end()) {
    std::vector<std::string> names;
    for (const PoolReport& r : pools_) names.push_back(r.pool);
    return absl::NotFoundError(
        absl::StrCat("no Slurm pool '", pool.substr(0, 80), "' (pools: ",
                     names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
  }
  if (count < 1 || count > p->max_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool ", pool, ": count ", count, " is not within 1..",
                     p->max_nodes, " (the pool's nodes)"));
  }
  if (request.empty() || request.size() > 128 ||
      !std::all_of(request.begin(), request.end(), [](char c) {
        return absl::ascii_isgraph(static_cast<unsigned char>(c));
      })) {
    return absl::InvalidArgumentError(
        "capacity request id: 1-128 printable characters without spaces");
  }
  if (auto done = requests_.find(request); done != requests_.end()) {
    return done->second;
  }
  std::vector<std::string> picked;
  for (const std::string& n : p->nodes) {
    if (static_cast<int>(picked.size()) >= count) break;
    auto st = pool_nodes_.find(n);
    if (st != pool_nodes_.end() &&
        st->second.state == PoolNodeState::kPoweredDown) {
      picked.push_back(n);
    }
  }
  if (picked.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pool ", pool, " has no powered-down node to power up (",
                     p->max_nodes, " nodes, all up, coming, going or failed)"));
  }
  const std::string list = absl::StrJoin(picked, ",");
  absl::StatusOr<std::string> r = client_->Run(
      {"scontrol", "update", absl::StrCat("NodeName=", list), "State=POWER_UP"},
      "");
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat("scontrol update NodeName=", list,
                     " State=POWER_UP: ", r.status().message()));
  }
  for (const std::string& n : picked) {
    SetPoolNode(n, PoolNodeState::kPoweringUp,
                absl::StrCat("power up asked (", request, ")"));
  }
  requests_[request] = picked;
  request_order_.push_back(request);
  while (request_order_.size() > static_cast<size_t>(kMaxCapacityRequests)) {
    requests_.erase(request_order_.front());
    request_order_.pop_front();
  }
  return picked;
}

absl::Status SlurmLauncher::ReleaseNode(const std::string& node) {
  auto pool = pool_of_.find(node);
  if (pool == pool_of_.end()) {
    if (gres_.contains(node)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", node,
          " is not a pool node (neither State=CLOUD nor a pool= feature): "
          "gpusched does not power it down"));
    }
    return absl::NotFoundError(
        absl::StrCat("no Slurm node '", node.substr(0, 80), "'"));
  }
  const PoolNodeState state = pool_nodes_[node].state;
  if (state == PoolNodeState::kPoweredDown ||
      state == PoolNodeState::kPoweringDown) {
    return absl::OkStatus();
  }
  if (state == PoolNodeState::kPoweringUp) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node,
        " is powering up: Slurm would power it up again after a power down; "
        "give it back once it has registered"));
  }
  absl::StatusOr<std::string> r =
      client_->Run({"scontrol", "update", absl::StrCat("NodeName=", node),
                    "State=POWER_DOWN_ASAP"},
                   "");
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat("scontrol update NodeName=", node,
                     " State=POWER_DOWN_ASAP: ", r.status().message()));
  }
  SetPoolNode(node, PoolNodeState::kPoweringDown, "power down asked");
  return absl::OkStatus();
}

}  // namespace gpusched::backends
