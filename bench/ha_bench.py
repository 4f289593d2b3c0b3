#!/usr/bin/env python3
"""HA benchmarks of docs/ha.md, on this machine, with real etcd and gpusched.

  failover   TRIALS kill -9's of the leader among INSTANCES instances on a
             3-member etcd: the time from the kill to the new leader's first
             completed controller pass (its leader.ready event), with the
             default lease (2 s). Targets (issue 29): p50 <= 2 s, p99 <= 5 s.
  soak       MINUTES of INSTANCES instances on a 3-member etcd beside
             `stress-ng --cpu N` (N=2 by default): leader changes after the
             first election (target: 0), lease renewals and their p99.
  store-cost one instance on SQLite and one on etcd, in the same run: the
             control API's write latency (POST /api/v1/apply of a tenant
             whose weight changes: one store write each) and apply-to-launch
             (POST /api/v1/apply of a deployment -> its replica.started
             event), p50 and p99, and the etcd/SQLite ratios.

Replicas are reference engines attached as endpoints (failover, soak: the
control plane's failover alone, no engine restarts) or launched locally
(store-cost). Prints figures and writes them as JSON to out/ha/<mode>.json.
Usage: bench/ha_bench.py BUILD_DIR MODE [options]; bench/ha_*.sh wrap it.
"""
import argparse
import http.client
import random
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


class Etcd:
    """A 3-member etcd on loopback, stopped with the bench."""

    def __init__(self, tmp, members=3):
        self.tmp = tmp
        self.procs = []
        self.client = [free_port() for _ in range(members)]
        peer = [free_port() for _ in range(members)]
        cluster = ",".join(f"m{i}=http://127.0.0.1:{peer[i]}" for i in range(members))
        for i in range(members):
            log = open(os.path.join(tmp, f"etcd{i}.log"), "w")
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"m{i}", "--data-dir", os.path.join(tmp, f"etcd{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{self.client[i]}",
                 "--advertise-client-urls", f"http://127.0.0.1:{self.client[i]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer[i]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer[i]}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--logger", "zap", "--log-outputs", os.path.join(tmp, f"etcd{i}.zap")],
                stdout=log, stderr=log, start_new_session=True))
        deadline = time.time() + 30
        while time.time() < deadline:
            if subprocess.run(["etcdctl", "--endpoints", self.endpoints(), "--command-timeout=2s",
                               "put", "/bench-health", "ok"], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise SystemExit("etcd did not start")

    def endpoints(self):
        return ",".join(f"http://127.0.0.1:{p}" for p in self.client)

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


class Instance:
    # `prefix`: a command to run it under (taskset -c 0).
    def __init__(self, bench, name, config, prefix=()):
        self.bench, self.name, self.config = bench, name, config
        self.prefix = list(prefix)
        self.proc, self.url = None, None

    def start(self):
        out = open(os.path.join(self.bench.tmp, f"{self.name}.out"), "w")
        err = open(os.path.join(self.bench.tmp, f"{self.name}.err"), "a")
        self.proc = subprocess.Popen(self.prefix + [self.bench.bin, "serve", "--config",
                                                   self.config],
                                     stdout=out, stderr=err, start_new_session=True)
        deadline = time.time() + 60
        path = os.path.join(self.bench.tmp, f"{self.name}.out")
        while time.time() < deadline:
            text = open(path).read()
            if "listening on " in text and "key:" in text:
                self.url = text.split("listening on ")[1].split()[0]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise SystemExit(f"{self.name} did not start: see {self.bench.tmp}/{self.name}.err")

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()
        self.proc = None

    def call(self, method, path, body=None, timeout=10):
        host, port = self.url.split("//")[1].split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=timeout)
        headers = {"Authorization": "Bearer " + self.bench.admin}
        if body is not None:
            headers["Content-Type"] = "application/yaml"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def json(self, path):
        try:
            status, data = self.call("GET", path)
            return json.loads(data) if status == 200 else None
        except OSError:
            return None


class Bench:
    def __init__(self, build):
        self.bin = os.path.join(build, "gpusched")
        if not os.access(self.bin, os.X_OK):
            raise SystemExit(f"missing {self.bin}")
        self.tmp = tempfile.mkdtemp(prefix="gpusched-ha-bench-")
        self.etcd = None
        self.instances = []
        self.engines = []
        self.admin = None

    def cleanup(self):
        for i in self.instances:
            i.kill()
        for e in self.engines:
            e.kill()
            e.wait()
        if self.etcd:
            self.etcd.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def engine(self):
        """A reference engine on a free port, for deployments to attach."""
        port = free_port()
        p = subprocess.Popen([self.bin, "engine", "--port", str(port), "--model", "chat",
                              "--hidden", "32"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        self.engines.append(p)
        return port

    def config(self, name, store, extra=""):
        path = os.path.join(self.tmp, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"""listen: 127.0.0.1:0
log_dir: {self.tmp}/logs-{name}
key_dir: {self.tmp}/keys
inventory: {ROOT}/examples/quickstart-inventory.yaml
{store}
ha:
  instance_id: {name}
{extra}""")
        return path


def leader_of(inst):
    c = inst.json("/api/v1/cluster")
    return c["leader"] if c and c.get("leader") else None


def wait(cond, timeout, step=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


def ha_setup(b, n, attach_ports):
    b.etcd = Etcd(b.tmp)
    eps = ", ".join(f'"{e}"' for e in b.etcd.endpoints().split(","))
    store = f"store:\n  etcd:\n    endpoints: [{eps}]\n    prefix: /bench/"
    deps = "deployments:\n  - name: chat\n    engine: {template: reference}\n" \
           "    endpoints: [" + ", ".join(f"127.0.0.1:{p}" for p in attach_ports) + "]\n" \
           "tenants:\n  - name: demo\n"
    for k in range(n):
        inst = Instance(b, f"gs{k}", b.config(f"gs{k}", store, deps))
        b.instances.append(inst)
        inst.start()
        if b.admin is None:
            b.admin = open(os.path.join(b.tmp, "keys", "admin.key")).read().strip()
    return wait(lambda: leader_of(b.instances[0]), 30)


def failover(b, args):
    ports = [b.engine() for _ in range(2)]
    if not ha_setup(b, args.instances, ports):
        raise SystemExit("no leader")
    samples, elected_ms, ready_ms = [], [], []
    rng = random.Random(args.seed)
    for t in range(args.trials):
        # Every instance registered, the leader acting and ready.
        wait(lambda: (c := b.instances[0].json("/api/v1/cluster") or
                      b.instances[1].json("/api/v1/cluster")) and
             len(c["instances"]) == args.instances and c.get("leader"), 30)
        live = [i for i in b.instances if i.proc]
        old = None
        for i in live:
            c = i.json("/api/v1/cluster")
            if c and c.get("leading"):
                old = i
                break
        if old is None:
            raise SystemExit(f"trial {t}: no instance leads")
        old_term = leader_of(old)["term"]
        # Renewals at their steady rhythm, and the kill at a random point
        # between two of them (seeded: the same draws each run).
        time.sleep(args.settle + rng.uniform(0, 1.0))
        t0 = time.time()
        old.kill()
        survivor = next(i for i in b.instances if i.proc)

        def ready():
            ev = survivor.json("/api/v1/events?kind=leader.ready&limit=5")
            for e in (ev or {}).get("items", []):
                if e["details"].get("term", 0) > old_term:
                    return e
            return None
        e = wait(ready, 30)
        if not e:
            raise SystemExit(f"trial {t}: no new leader within 30 s")
        took = e["timeMicros"] / 1e6 - t0
        samples.append(took)
        ev = survivor.json("/api/v1/events?kind=leader.elected&limit=5")
        el = next((x for x in ev["items"] if x["details"].get("term", 0) > old_term), None)
        if el:
            elected_ms.append((el["timeMicros"] / 1e6 - t0) * 1e3)
        ready_ms.append(e["details"]["takeover_ms"] + e["details"]["first_pass_ms"])
        print(f"trial {t + 1:2d}: {took * 1e3:7.1f} ms (elected after {elected_ms[-1]:.1f} ms, "
              f"taken over and passed in {ready_ms[-1]:.1f} ms)", flush=True)
        old.start()  # back as a follower
    return {
        "trials": len(samples),
        "instances": args.instances,
        "lease_ttl_s": 2,
        "failover_s": {"p50": pct(samples, 50), "p90": pct(samples, 90),
                       "p99": pct(samples, 99), "max": max(samples), "min": min(samples)},
        "kill_to_elected_ms_p50": pct(elected_ms, 50),
        "elected_to_first_pass_ms_p50": pct(ready_ms, 50),
        "targets": {"p50_s": 2, "p99_s": 5},
        "met": pct(samples, 50) <= 2 and pct(samples, 99) <= 5,
    }


def metric(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def soak(b, args):
    ports = [b.engine()]
    if not ha_setup(b, args.instances, ports):
        raise SystemExit("no leader")
    stress = subprocess.Popen(["stress-ng", "--cpu", str(args.stress), "--timeout",
                               f"{int(args.minutes * 60) + 30}s"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        first = leader_of(b.instances[0])
        end = time.time() + args.minutes * 60
        leaders = set()
        while time.time() < end:
            l = leader_of(b.instances[0])
            if l:
                leaders.add((l["id"], l["term"]))
            time.sleep(5)
    finally:
        stress.kill()
        stress.wait()
    elected = lost = renew_ok = renew_failed = 0
    for i in b.instances:
        _, m = i.call("GET", "/metrics")
        m = m.decode()
        elected += metric(m, 'gpusched_leader_transitions_total{change="elected"}')
        lost += metric(m, 'gpusched_leader_transitions_total{change="lost"}')
        renew_ok += metric(m, 'gpusched_lease_renewals_total{result="ok"}')
        renew_failed += metric(m, 'gpusched_lease_renewals_total{result="failed"}')
    ev = b.instances[0].json("/api/v1/events?kind=leader.elected&kind=leader.lost&kind=leader.paused&limit=1000")
    kinds = [e["kind"] for e in (ev or {}).get("items", [])]
    return {
        "minutes": args.minutes,
        "stress_ng_cpu_workers": args.stress,
        "instances": args.instances,
        "first_leader": first,
        "leaders_seen": sorted(leaders),
        "elections": int(elected),
        "spurious_leader_changes": int(elected) - 1,
        "losses": int(lost),
        "pauses": kinds.count("leader.paused"),
        "renewals_ok": int(renew_ok),
        "renewals_failed": int(renew_failed),
        "target_spurious": 0,
        "met": int(elected) - 1 == 0 and int(lost) == 0,
    }


def store_cost(b, args):
    b.etcd = Etcd(b.tmp)
    eps = ", ".join(f'"{e}"' for e in b.etcd.endpoints().split(","))
    stores = {
        "sqlite": f"state: {b.tmp}/state.db",
        "etcd": f"store:\n  etcd:\n    endpoints: [{eps}]\n    prefix: /cost/",
    }
    results = {}
    for kind, store in stores.items():
        inst = Instance(b, kind, b.config(kind, store, "tenants:\n  - name: demo\n"))
        b.instances.append(inst)
        inst.start()
        if b.admin is None:
            b.admin = open(os.path.join(b.tmp, "keys", "admin.key")).read().strip()
        wait(lambda: (inst.json("/api/v1/cluster") or {}).get("leading"), 30)
        writes = []
        for k in range(args.writes):
            body = (f"apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {{name: probe}}\n"
                    f"spec: {{weight: {k % 50 + 1}.5}}\n")
            t0 = time.perf_counter()
            status, data = inst.call("POST", "/api/v1/apply", body)
            writes.append((time.perf_counter() - t0) * 1e3)
            if status != 200:
                raise SystemExit(f"{kind}: apply answered {status}: {data[:200]}")
        launches = []
        for k in range(args.launches):
            name = f"cost{k}"
            body = (f"apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {{name: {name}}}\n"
                    "spec:\n  engine: {template: reference, args: [\"--hidden\", \"16\"]}\n"
                    "  replicas: 1\n  resources: {fraction: {milli: 100, memory: 1Gi}}\n")
            t0 = time.time()
            status, data = inst.call("POST", "/api/v1/apply", body)
            if status != 200:
                raise SystemExit(f"{kind}: apply answered {status}: {data[:200]}")

            def started():
                ev = inst.json(f"/api/v1/events?kind=replica.started&deployment={name}&limit=1")
                return ev["items"][0] if ev and ev["items"] else None
            e = wait(started, 60, step=0.005)
            if not e:
                raise SystemExit(f"{kind}: {name} never started")
            launches.append((e["timeMicros"] / 1e6 - t0) * 1e3)
            inst.call("DELETE", f"/api/v1/deployments/{name}")
            wait(lambda: inst.json(f"/api/v1/deployments/{name}") is None, 60)
        results[kind] = {
            "write_ms": {"p50": pct(writes, 50), "p99": pct(writes, 99), "n": len(writes)},
            "apply_to_launch_ms": {"p50": pct(launches, 50), "p99": pct(launches, 99),
                                   "n": len(launches)},
        }
        inst.kill(signal.SIGTERM)
        print(f"{kind:6s}: write p50 {results[kind]['write_ms']['p50']:.2f} ms, "
              f"p99 {results[kind]['write_ms']['p99']:.2f} ms; apply-to-launch p50 "
              f"{results[kind]['apply_to_launch_ms']['p50']:.1f} ms, p99 "
              f"{results[kind]['apply_to_launch_ms']['p99']:.1f} ms", flush=True)
    s, e = results["sqlite"], results["etcd"]
    results["ratios_etcd_over_sqlite"] = {
        "write_p50": e["write_ms"]["p50"] / s["write_ms"]["p50"],
        "write_p99": e["write_ms"]["p99"] / s["write_ms"]["p99"],
        "apply_to_launch_p50": e["apply_to_launch_ms"]["p50"] / s["apply_to_launch_ms"]["p50"],
        "apply_to_launch_p99": e["apply_to_launch_ms"]["p99"] / s["apply_to_launch_ms"]["p99"],
    }
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("mode", choices=["failover", "soak", "store-cost"])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--stress", type=int, default=2)
    ap.add_argument("--writes", type=int, default=300)
    ap.add_argument("--launches", type=int, default=20)
    args = ap.parse_args()
    for tool in ["etcd", "etcdctl"] + (["stress-ng"] if args.mode == "soak" else []):
        if shutil.which(tool) is None:
            print(f"skipped: {tool} is not installed (scripts/install-deps.sh installs it)")
            return 0
    modes = {"failover": failover, "soak": soak, "store-cost": store_cost}
    r = run_mode(Bench(os.path.abspath(args.build)), modes[args.mode], args)
    print(json.dumps(r, indent=2))
    return 0


def run_mode(bench, fn, args):
    """fn(bench, args), the bench cleaned up after; its result is written to
    out/ha/<mode>.json and returned."""
    try:
        r = fn(bench, args)
    finally:
        bench.cleanup()
    out = os.path.join(ROOT, "out", "ha")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{args.mode}.json"), "w") as f:
        json.dump(r, f, indent=2)
    return r


if __name__ == "__main__":
    sys.exit(main())
