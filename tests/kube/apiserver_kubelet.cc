// The stand-in's simulated kubelet (apiserver.h): runs the first container
// of each Pod bound to a known Node as a local process group and reports
// it through the Store as a kubelet would.
//
// What it does, and where it differs from a real kubelet:
//   - Admission, as the kubelet's: the Pod's nodeSelector must match the
//     node's labels, and the sum of its containers' requests (limits when no
//     requests) must fit the node's allocatable beside the Pods it already
//     runs; else the Pod is Failed with reason NodeAffinity / OutOf<resource>.
//     Required node affinity and taints are not checked.
//   - The image is ignored: the first container's `command` + `args` ($(VAR)
//     expanded) are exec'd directly (no shell) in their own session with the
//     container's `env` over this program's environment, stdin /dev/null and
//     output appended to <log-dir>/<ns>_<pod>.log. A container without a
//     `command` cannot run (the image's entrypoint is unknown): StartError.
//     Other containers and init containers are not run or reported.
//     env valueFrom supports fieldRef only (secrets and config maps: "").
//   - Pod IP 127.0.<node index + 1>.<1..250>, free again when the Pod object
//     is gone; a Pod finding no free IP waits in Pending.
//   - Readiness probes: httpGet (HTTP only; a 2xx or 3xx answer passes),
//     tcpSocket and exec, with their success and failure thresholds and
//     timeoutSeconds, but every probe runs at least every 0.5 s whatever its
//     periodSeconds (and initialDelaySeconds is ignored): the stand-in
//     compresses time. Liveness and startup probes are not run.
//   - restartPolicy is treated as Never: the first exit is final (phase
//     Succeeded for exit 0, else Failed).
//   - A node whose Ready condition is Unknown has an unreachable kubelet:
//     nothing on it changes (no start, no status, no termination) until it
//     is Ready again, though a delete with grace 0 still removes the Pod and
//     its process is killed. Ready False: running Pods are reported not
//     ready and no new Pod starts there; exits and deletions proceed.
//   - When a container's main process exits, the rest of its process group
//     is SIGKILLed (as the end of its PID namespace would).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/kube/apiserver.h"

namespace gpusched::kubetest {

namespace {

using std::chrono::milliseconds;

std::string InternalIp(const json& node) {
  for (const json& a : node["status"].value("addresses", json::array())) {
    if (a.value("type", "") == "InternalIP") return a.value("address", "");
  }
  return "127.0.0.1";
}

// The Pod's requests: each container's (its limits where it has no request).
std::map<std::string, int64_t> PodRequests(const json& spec) {
  std::map<std::string, int64_t> total;
  for (const json& c : spec.value("containers", json::array())) {
    const json res = c.value("resources", json::object());
    json want = res.value("limits", json::object());
    const json requests = res.value("requests", json::object());
    for (const auto& [k, v] : requests.items()) {
      want[k] = v;
    }
    for (const auto& [k, v] : want.items()) {
      if (auto q = ParseQuantityMilli(v)) total[k] += *q;
    }
  }
  return total;
}

std::string FormatAmount(const std::string& resource, int64_t milli) {
  return resource == "cpu" ? absl::StrCat(milli)
                           : absl::StrCat((milli + 999) / 1000);
}

}  // namespace

Kubelet::Kubelet(Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

Kubelet::~Kubelet() { Stop(); }

// The Ready and ContainersReady conditions of a running Pod whose
// container `cname` is (not) ready.
static void SetReadyConditions(json& st, bool ready, const std::string& cname) {
  const std::string why =
      ready ? ""
            : absl::StrCat("containers with unready status: [", cname, "]");
  SetCondition(st, "Ready", ready ? "True" : "False",
               ready ? "" : "ContainersNotReady", why);
  SetCondition(st, "ContainersReady", ready ? "True" : "False",
               ready ? "" : "ContainersNotReady", why);
}

void Kubelet::Start() {
  loop_ = std::thread([this] { Loop(); });
  prober_ = std::thread([this] { ProbeLoop(); });
}

void Kubelet::Wake() {
  absl::MutexLock l(&mu_);
  wake_ = true;
}

void Kubelet::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopped_) return;
    stop_ = true;
  }
  if (loop_.joinable()) loop_.join();
  if (prober_.joinable()) prober_.join();
  absl::MutexLock l(&mu_);
  stopped_ = true;
  for (auto& [uid, p] : procs_) {
    if (p.pid == 0 || p.exited) continue;
    SignalGroup(p.pid, SIGKILL);
    int st = 0;
    while (waitpid(p.pid, &st, 0) < 0 && errno == EINTR) {
    }
    p.exited = true;
  }
}

void Kubelet::Loop() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      const auto woken = [](Kubelet* k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k->mu_) {
        return k->stop_ || k->wake_;
      };
      // Processes are reaped by polling (waitpid WNOHANG on our own pids):
      // every 50 ms while any runs.
      mu_.AwaitWithTimeout(absl::Condition(+woken, this),
                           absl::Milliseconds(procs_.empty() ? 1000 : 50));
      if (stop_) return;
      wake_ = false;
    }
    Pass();
  }
}

void Kubelet::Reap() {
  absl::MutexLock l(&mu_);
  for (auto& [uid, p] : procs_) {
    if (p.pid == 0 || p.exited) continue;
    int st = 0;
    const pid_t r = waitpid(p.pid, &st, WNOHANG);
    if (r != p.pid) continue;
    p.exited = true;
    p.wait_status = st;
    p.finished_at = NowRfc3339();
    SignalGroup(p.pid, SIGKILL);  // what is left of its process group
    std::fprintf(stderr, "kubelet: pod %s/%s pid %d exited (status %d)\n",
                 p.ns.c_str(), p.name.c_str(), static_cast<int>(p.pid), st);
  }
}

int Kubelet::AllocateIp(const std::string& node) {
  std::set<int>& used = ips_[node];
  for (int n = 1; n <= 250; ++n) {
    if (used.insert(n).second) return n;
  }
  return 0;
}

void Kubelet::Pass() {
  Reap();
  const std::vector<PodBrief> briefs = store_->PodBriefs();
  const std::map<std::string, std::string> readiness = store_->NodeReadiness();
  std::map<std::string, const PodBrief*> by_uid;
  for (const PodBrief& b : briefs) by_uid[b.uid] = &b;
  std::vector<PodBrief> to_start;
  std::vector<std::string> to_post_exit, to_remove;
  std::vector<std::pair<std::string, bool>> to_ready;
  {
    absl::MutexLock l(&mu_);
    const SteadyTime now = std::chrono::steady_clock::now();
    for (auto it = procs_.begin(); it != procs_.end();) {
      Proc& p = it->second;
      if (by_uid.contains(p.uid)) {
        ++it;
        continue;
      }
      // The object is gone (deleted with grace 0, or our final delete).
      if (p.pid != 0 && !p.exited) {
        if (!p.kill_sent) SignalGroup(p.pid, SIGKILL);
        p.kill_sent = true;
        ++it;
        continue;
      }
      ips_[p.node].erase(p.octet);
      it = procs_.erase(it);
    }
    for (auto it = given_up_.begin(); it != given_up_.end();) {
      it = by_uid.contains(*it) ? std::next(it) : given_up_.erase(it);
    }
    for (const PodBrief& b : briefs) {
      if (b.node.empty()) continue;
      auto ready = readiness.find(b.node);
      auto pit = procs_.find(b.uid);
      if (ready == readiness.end()) {
        // Bound to a node that does not exist: nothing runs it, and a
        // delete completes at once (the Pod garbage collector's job).
        if (b.deleting && pit == procs_.end()) to_remove.push_back(b.uid);
        continue;
      }
      const std::string state = ready->second.empty() ? "True" : ready->second;
      if (state == "Unknown") continue;  // an unreachable kubelet
      if (pit == procs_.end()) {
        if (b.deleting) {
          to_remove.push_back(b.uid);  // nothing ran
        } else if (b.phase == "Pending" && state == "True" &&
                   !given_up_.contains(b.uid)) {
          to_start.push_back(b);
        }
        continue;
      }
      Proc& p = pit->second;
      if (p.exited && !p.posted_exit) to_post_exit.push_back(b.uid);
      if (b.deleting) {
        if (p.exited) {
          to_remove.push_back(b.uid);
          continue;
        }
        const SteadyTime due = now + std::chrono::seconds(b.grace_seconds);
        if (!p.term_sent) {
          SignalGroup(p.pid, SIGTERM);
          p.term_sent = true;
          p.kill_at = due;
        }
        p.kill_at = std::min(p.kill_at, due);
        if (!p.kill_sent && now >= p.kill_at) {
          SignalGroup(p.pid, SIGKILL);
          p.kill_sent = true;
        }
        continue;
      }
      const bool want = p.ready && state == "True";
      if (!p.exited && p.posted_ready != want)
        to_ready.emplace_back(b.uid, want);
    }
  }
  for (const std::string& uid : to_post_exit) PostExit(uid);
  for (const std::string& uid : to_remove) store_->RemovePod(uid);
  for (const PodBrief& b : to_start) {
    try {  // nlohmann::json throws on a field of an unexpected type
      StartPod(b);
    } catch (const json::exception& e) {
      {
        absl::MutexLock l(&mu_);
        given_up_.insert(b.uid);
      }
      std::fprintf(stderr, "kubelet: pod %s/%s not started: %s\n", b.ns.c_str(),
                   b.name.c_str(), e.what());
    }
  }
  for (const auto& [uid, ready] : to_ready) SyncReady(uid, ready);
}

void Kubelet::StartPod(const PodBrief& brief) {
  const std::optional<json> pod = store_->PodByUid(brief.uid);
  const std::optional<json> node = store_->NodeByName(brief.node);
  const int index = store_->NodeIndex(brief.node);
  if (!pod || !node || index < 0 ||
      (*pod)["metadata"].contains("deletionTimestamp")) {
    return;
  }
  const json& spec = (*pod)["spec"];
  const json& c = spec["containers"][0];
  const std::string cname = c.value("name", "");
  auto fail = [&](const std::string& reason, const std::string& message,
                  bool start_error) {
    {
      absl::MutexLock l(&mu_);
      given_up_.insert(brief.uid);
    }
    std::fprintf(stderr, "kubelet: pod %s/%s failed: %s: %s\n",
                 brief.ns.c_str(), brief.name.c_str(), reason.c_str(),
                 message.c_str());
    store_->UpdatePod(brief.uid, [&](json& p) {
      json& st = p["status"];
      st["phase"] = "Failed";
      if (!start_error) {
        st["reason"] = reason;
        st["message"] = message;
        return;
      }
      const std::string now = NowRfc3339();
      st["hostIP"] = InternalIp(*node);
      st["hostIPs"] = {{{"ip", st["hostIP"]}}};
      st["startTime"] = now;
      SetCondition(st, "PodScheduled", "True");
      SetCondition(st, "Initialized", "True");
      SetCondition(st, "Ready", "False", "PodFailed");
      SetCondition(st, "ContainersReady", "False", "PodFailed");
      st["containerStatuses"] = {{{"name", cname},
                                  {"image", c.value("image", "")},
                                  {"imageID", ""},
                                  {"ready", false},
                                  {"restartCount", 0},
                                  {"started", false},
                                  {"lastState", json::object()},
                                  {"state",
                                   {{"terminated",
                                     {{"exitCode", 128},
                                      {"reason", reason},
                                      {"message", message},
                                      {"startedAt", now},
                                      {"finishedAt", now}}}}}}};
    });
  };

  // Admission.
  const json labels = (*node)["metadata"].value("labels", json::object());
  const json selector = spec.value("nodeSelector", json::object());
  for (const auto& [k, v] : selector.items()) {
    if (!labels.contains(k) || labels[k] != v) {
      fail("NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed",
           false);
      return;
    }
  }
  const std::map<std::string, int64_t> requests = PodRequests(spec);
  const json status = (*node)["status"];
  const json alloc =
      status.value("allocatable", status.value("capacity", json::object()));
  std::map<std::string, int64_t> used;
  int64_t pods = 0;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [uid, p] : procs_) {
      if (p.node != brief.node || p.exited) continue;
      ++pods;
      for (const auto& [k, v] : p.requests) used[k] += v;
    }
  }
  if (alloc.is_object() && !alloc.empty()) {
    std::map<std::string, int64_t> want = requests;
    want["pods"] = 1000;
    used["pods"] = pods * 1000;
    for (const auto& [res, amount] : want) {
      if (amount <= 0) continue;
      if (res != "pods" && res != "cpu" && res != "memory" &&
          res != "ephemeral-storage" && res.find('/') == std::string::npos &&
          !res.starts_with("hugepages-")) {
        continue;
      }
      const int64_t cap =
          alloc.contains(res) ? ParseQuantityMilli(alloc[res]).value_or(0) : 0;
      if (res == "pods" && !alloc.contains("pods")) continue;
      if (used[res] + amount > cap) {
        fail(absl::StrCat("OutOf", res),
             absl::StrCat("Pod was rejected: Node didn't have enough "
                          "resource: ",
                          res, ", requested: ", FormatAmount(res, amount),
                          ", used: ", FormatAmount(res, used[res]),
                          ", capacity: ", FormatAmount(res, cap)),
             false);
        return;
      }
    }
  }

  if (!c.contains("command") || !c["command"].is_array() ||
      c["command"].empty()) {
    fail("StartError",
         "no command: this stand-in ignores images, so a container must give "
         "its command",
         true);
    return;
  }
  int octet = 0;
  {
    absl::MutexLock l(&mu_);
    octet = AllocateIp(brief.node);
  }
  if (octet == 0) return;  // no free IP on this node: stays Pending
  const std::string ip = absl::StrCat("127.0.", index + 1, ".", octet);
  const std::string host_ip = InternalIp(*node);

  // The environment, each value expanded with those before it.
  std::vector<std::pair<std::string, std::string>> env;
  std::map<std::string, std::string> env_map;
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env_map.find(name);
    if (it == env_map.end()) return std::nullopt;
    return it->second;
  };
  const json& meta = (*pod)["metadata"];
  for (const json& e : c.value("env", json::array())) {
    std::string value;
    if (e.contains("value") && e["value"].is_string()) {
      value = ExpandVars(e["value"].get<std::string>(), lookup);
    } else if (e.contains("valueFrom") && e["valueFrom"].is_object() &&
               e["valueFrom"].contains("fieldRef")) {
      const std::string path =
          e["valueFrom"]["fieldRef"].value("fieldPath", "");
      if (path == "metadata.name") value = meta.value("name", "");
      if (path == "metadata.namespace") value = meta.value("namespace", "");
      if (path == "metadata.uid") value = meta.value("uid", "");
      if (path == "spec.nodeName") value = brief.node;
      if (path == "spec.serviceAccountName") {
        value = spec.value("serviceAccountName", "");
      }
      if (path == "status.podIP" || path == "status.podIPs") value = ip;
      if (path == "status.hostIP" || path == "status.hostIPs") value = host_ip;
      for (const char* field : {"labels", "annotations"}) {
        const std::string prefix = absl::StrCat("metadata.", field, "['");
        if (path.starts_with(prefix) && path.ends_with("']")) {
          const std::string key =
              path.substr(prefix.size(), path.size() - prefix.size() - 2);
          const json m = meta.value(field, json::object());
          value = m.is_object() ? m.value(key, "") : "";
        }
      }
    }
    const std::string name = e.value("name", "");
    env.emplace_back(name, value);
    env_map[name] = value;
  }
  std::vector<std::string> argv;
  for (const char* f : {"command", "args"}) {
    for (const json& a : c.value(f, json::array())) {
      argv.push_back(ExpandVars(a.get<std::string>(), lookup));
    }
  }
  const std::string log = options_.log_dir.empty()
                              ? ""
                              : absl::StrCat(options_.log_dir, "/", brief.ns,
                                             "_", brief.name, ".log");
  const Spawned s = Spawn(argv, env, c.value("workingDir", ""), log);
  if (!s.error.empty()) {
    {
      absl::MutexLock l(&mu_);
      ips_[brief.node].erase(octet);
    }
    fail("StartError", s.error, true);
    return;
  }

  Proc p;
  p.uid = brief.uid;
  p.ns = brief.ns;
  p.name = brief.name;
  p.node = brief.node;
  p.container = cname;
  p.ip = ip;
  p.octet = octet;
  p.pid = s.pid;
  p.requests = requests;
  p.started_at = NowRfc3339();
  if (c.contains("readinessProbe") && c["readinessProbe"].is_object()) {
    const json& rp = c["readinessProbe"];
    Probe probe;
    probe.period =
        std::min(milliseconds(500),
                 milliseconds(1000 * rp.value("periodSeconds", int64_t{10})));
    probe.timeout =
        std::clamp(milliseconds(1000 * rp.value("timeoutSeconds", int64_t{1})),
                   milliseconds(100), milliseconds(10'000));
    probe.success_threshold = std::max<int>(1, rp.value("successThreshold", 1));
    probe.failure_threshold = std::max<int>(1, rp.value("failureThreshold", 3));
    auto port_of = [&](const json& port) {
      if (port.is_number_integer()) return port.get<int>();
      if (port.is_string()) {
        int n = 0;
        if (absl::SimpleAtoi(port.get<std::string>(), &n)) return n;
        for (const json& cp : c.value("ports", json::array())) {
          if (cp.value("name", "") == port) return cp.value("containerPort", 0);
        }
      }
      return 0;
    };
    for (const char* type : {"httpGet", "tcpSocket", "exec"}) {
      if (!rp.contains(type) || !rp[type].is_object()) continue;
      const json& h = rp[type];
      probe.type = type;
      probe.host = h.value("host", ip);
      probe.port = port_of(h.value("port", json()));
      probe.path = h.value("path", "/");
      if (h.value("scheme", "HTTP") != "HTTP") probe.type = "unsupported";
      for (const json& hh : h.value("httpHeaders", json::array())) {
        probe.headers.push_back(
            absl::StrCat(hh.value("name", ""), ": ", hh.value("value", "")));
      }
      for (const json& a : h.value("command", json::array())) {
        if (a.is_string()) probe.command.push_back(a.get<std::string>());
      }
      probe.env = env;
      break;
    }
    p.probe = std::move(probe);
  } else {
    p.ready = true;
  }
  const bool ready = p.ready;
  const std::string started = p.started_at;
  {
    absl::MutexLock l(&mu_);
    p.posted_ready = ready;
    procs_[brief.uid] = std::move(p);
  }
  std::fprintf(stderr, "kubelet: started pod %s/%s pid %d ip %s\n",
               brief.ns.c_str(), brief.name.c_str(), static_cast<int>(s.pid),
               ip.c_str());
  store_->UpdatePod(brief.uid, [&](json& pod) {
    json& st = pod["status"];
    st["phase"] = "Running";
    st["hostIP"] = host_ip;
    st["hostIPs"] = {{{"ip", host_ip}}};
    st["podIP"] = ip;
    st["podIPs"] = {{{"ip", ip}}};
    st["startTime"] = started;
    SetCondition(st, "PodReadyToStartContainers", "True");
    SetCondition(st, "Initialized", "True");
    SetReadyConditions(st, ready, cname);
    SetCondition(st, "PodScheduled", "True");
    st["containerStatuses"] = {
        {{"name", cname},
         {"image", c.value("image", "")},
         {"imageID", ""},
         {"containerID", absl::StrCat("standin://", s.pid)},
         {"ready", ready},
         {"restartCount", 0},
         {"started", true},
         {"lastState", json::object()},
         {"state", {{"running", {{"startedAt", started}}}}}}};
  });
}

void Kubelet::SyncReady(const std::string& uid, bool ready) {
  std::string cname;
  {
    absl::MutexLock l(&mu_);
    auto it = procs_.find(uid);
    if (it == procs_.end() || it->second.exited) return;
    it->second.posted_ready = ready;
    cname = it->second.container;
  }
  store_->UpdatePod(uid, [&](json& pod) {
    json& st = pod["status"];
    if (st.value("phase", "") != "Running") return;
    SetReadyConditions(st, ready, cname);
    if (st.contains("containerStatuses") && !st["containerStatuses"].empty()) {
      st["containerStatuses"][0]["ready"] = ready;
    }
  });
}

bool Kubelet::FailProbes(const std::string& ns, const std::string& name,
                         bool fail) {
  absl::MutexLock l(&mu_);
  for (auto& [uid, p] : procs_) {
    if (p.ns != ns || p.name != name || p.exited || !p.probe) continue;
    p.probes_fail = fail;
    return true;
  }
  return false;
}

bool Kubelet::Evict(const std::string& ns, const std::string& name) {
  absl::MutexLock l(&mu_);
  for (auto& [uid, p] : procs_) {
    if (p.ns != ns || p.name != name || p.exited || p.pid <= 0) continue;
    p.evicted = true;
    kill(-p.pid, SIGKILL);
    wake_ = true;
    return true;
  }
  return false;
}

void Kubelet::PostExit(const std::string& uid) {
  Proc p;
  {
    absl::MutexLock l(&mu_);
    auto it = procs_.find(uid);
    if (it == procs_.end()) return;
    it->second.posted_exit = true;
    p = it->second;
  }
  int code = 0, sig = 0;
  if (WIFEXITED(p.wait_status)) {
    code = WEXITSTATUS(p.wait_status);
  } else if (WIFSIGNALED(p.wait_status)) {
    sig = WTERMSIG(p.wait_status);
    code = 128 + sig;
  }
  store_->UpdatePod(uid, [&](json& pod) {
    json& st = pod["status"];
    st["phase"] = code == 0 && !p.evicted ? "Succeeded" : "Failed";
    if (p.evicted) {
      st["reason"] = "Evicted";
      st["message"] =
          "The node was low on resource: memory. Threshold quantity: 100Mi, "
          "available: 20Mi.";
    }
    SetCondition(st, "Ready", "False", "PodCompleted");
    SetCondition(st, "ContainersReady", "False", "PodCompleted");
    json term = {{"exitCode", code},
                 {"reason", code == 0 ? "Completed" : "Error"},
                 {"startedAt", p.started_at},
                 {"finishedAt", p.finished_at},
                 {"containerID", absl::StrCat("standin://", p.pid)}};
    if (sig != 0) term["signal"] = sig;
    if (st.contains("containerStatuses") && !st["containerStatuses"].empty()) {
      json& cs = st["containerStatuses"][0];
      cs["ready"] = false;
      cs["started"] = false;
      cs["state"] = {{"terminated", std::move(term)}};
    }
  });
}

bool Kubelet::RunProbe(const Probe& probe) {
  if (probe.type == "httpGet") {
    return HttpGet(probe.host, probe.port, probe.path, probe.headers,
                   probe.timeout);
  }
  if (probe.type == "tcpSocket") {
    const int fd = ConnectWithin(probe.host, probe.port, probe.timeout);
    if (fd >= 0) close(fd);
    return fd >= 0;
  }
  if (probe.type == "exec" && !probe.command.empty()) {
    const Spawned s = Spawn(probe.command, probe.env, "", "");
    if (s.pid == 0) return false;
    const auto deadline = std::chrono::steady_clock::now() + probe.timeout;
    int st = 0;
    while (true) {
      const pid_t r = waitpid(s.pid, &st, WNOHANG);
      if (r == s.pid) return WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (r < 0 && errno != EINTR) return false;
      if (std::chrono::steady_clock::now() >= deadline) {
        SignalGroup(s.pid, SIGKILL);
        while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR) {
        }
        return false;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  return false;  // no handler, or HTTPS: never passes here
}

void Kubelet::ProbeLoop() {
  while (true) {
    std::vector<std::pair<std::string, Probe>> due;
    {
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
      if (stop_) return;
      const SteadyTime now = std::chrono::steady_clock::now();
      for (auto& [uid, p] : procs_) {
        if (!p.probe || p.exited || p.pid == 0 || p.term_sent ||
            now < p.next_probe) {
          continue;
        }
        p.next_probe = now + p.probe->period;
        if (p.probes_fail) {
          Probe failing = *p.probe;
          failing.type = "unreachable";  // RunProbe fails it
          due.emplace_back(uid, std::move(failing));
          continue;
        }
        due.emplace_back(uid, *p.probe);
      }
    }
    if (due.empty()) continue;
    std::vector<std::pair<std::string, bool>> results;
    for (const auto& [uid, probe] : due) {
      results.emplace_back(uid, RunProbe(probe));
    }
    bool changed = false;
    {
      absl::MutexLock l(&mu_);
      for (const auto& [uid, ok] : results) {
        auto it = procs_.find(uid);
        if (it == procs_.end()) continue;
        Proc& p = it->second;
        if (ok) {
          ++p.successes;
          p.failures = 0;
          if (!p.ready && p.successes >= p.probe->success_threshold) {
            p.ready = changed = true;
          }
        } else {
          ++p.failures;
          p.successes = 0;
          if (p.ready && p.failures >= p.probe->failure_threshold) {
            p.ready = false;
            changed = true;
          }
        }
      }
      if (changed) wake_ = true;
    }
  }
}

json Kubelet::Describe() const {
  absl::MutexLock l(&mu_);
  json out = json::array();
  for (const auto& [uid, p] : procs_) {
    json d = {{"uid", uid},
              {"namespace", p.ns},
              {"name", p.name},
              {"node", p.node},
              {"podIP", p.ip},
              {"pid", p.pid},
              {"process", p.exited ? "exited" : "running"},
              {"ready", p.ready},
              {"terminating", p.term_sent}};
    if (p.exited) {
      if (WIFEXITED(p.wait_status)) d["exitCode"] = WEXITSTATUS(p.wait_status);
      if (WIFSIGNALED(p.wait_status)) d["signal"] = WTERMSIG(p.wait_status);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace gpusched::kubetest
