#!/usr/bin/env python3
"""Serving figures of an HA installation (docs/ha.md, "Measured"), on this
machine, with real etcd, HAProxy (deploy/haproxy/haproxy.cfg) and gpusched.

  gateway  one instance on etcd against one on SQLite, in the same run: max
           throughput (bench/loadgen, closed loop, 64 connections) and the
           latency added over the engine alone at half of SQLite's max (open
           loop), through the full gateway path to bench/stub_upstream.
           Instances on CPU 0, stub and load generator on CPU 1. Target:
           etcd/SQLite throughput >= 0.95x.
  scale    1, 2 and 3 instances behind HAProxy (closed loop, 64
           connections): total throughput and CPU per request of gpusched
           (and of HAProxy), from /proc; on paper, the cores and instances
           for 100k requests/s at the measured CPU per request.
  prefix   the prefix-cache hit rate of the Mooncake conversation sample
           (testdata/mooncake-fast25, 800 requests, time-compressed) on four
           reference engines with a prefix cache, routed by prefix-affinity:
           through 3 instances behind HAProxy against 1 instance (and 1
           instance with least-outstanding, for scale). Prompts are made of
           the trace's block ids, one engine KV block (16 words) per trace
           block, so prompts share exactly the prefixes the trace says they
           share. Target: 3 instances >= 0.9x the single instance's rate.
  limits   a tenant's limits with 3 instances behind HAProxy under a load
           three times its requests-per-minute limit (and, skewed, all of it
           sent to one instance), and a concurrency limit under 4x the
           streams it allows: admitted against allowed (the burst plus the
           rate over the run; the concurrency bound, against the most
           streams the upstream served at once). Target: at most 10% over.

Each mode repeats RUNS times (alternating the peers) and prints medians;
JSON in out/ha/<mode>.json. Usage: bench/ha_serving.py BUILD_DIR MODE [--runs N]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_bench import (ROOT, Bench, Etcd, Instance, free_port, metric, pct,  # noqa: E402
                      run_mode, wait)

PIN_PROXY = ["taskset", "-c", "0"] if os.cpu_count() >= 2 else []
PIN_LOAD = ["taskset", "-c", "1"] if os.cpu_count() >= 2 else []


def cpu_seconds(pid):
    """utime + stime of a process and its threads, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Serving(Bench):
    def __init__(self, build):
        super().__init__(build)
        self.build = build
        self.others = []  # stub, HAProxy: Popen

    def cleanup(self):
        for p in self.others:
            p.kill()
            p.wait()
        super().cleanup()

    def stub(self):
        out = os.path.join(self.tmp, "stub.out")
        p = subprocess.Popen(PIN_LOAD + [os.path.join(self.build, "bench", "stub_upstream")],
                             stdout=open(out, "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.others.append(p)
        port = wait(lambda: ("listening on " in open(out).read()) and
                    int(open(out).read().split("listening on ")[1].split()[0]), 20)
        if not port:
            raise SystemExit("the stub did not start")
        return port

    def ref_engine(self, args=()):
        port = free_port()
        p = subprocess.Popen([self.bin, "engine", "--port", str(port), "--model", "chat"] +
                             list(args), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        self.engines.append(p)
        wait(lambda: get(port, "/healthz")[0] == 200, 20)
        return port, p

    def haproxy(self, ports):
        """HAProxy with the shipped configuration in front of `ports`
        (servers left over point at a closed port: down)."""
        lb = free_port()
        env = dict(os.environ, GPUSCHED_LISTEN=f"127.0.0.1:{lb}")
        for k in range(3):
            env[f"GPUSCHED_{k + 1}"] = f"127.0.0.1:{ports[k] if k < len(ports) else 1}"
        p = subprocess.Popen(PIN_PROXY + ["haproxy", "-f",
                                          os.path.join(ROOT, "deploy/haproxy/haproxy.cfg")],
                             env=env, stdout=open(os.path.join(self.tmp, "haproxy.log"), "a"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.others.append(p)
        wait(lambda: get(lb, "/readyz")[0] == 200, 20)
        time.sleep(1.5)  # the health checks have taken the unused servers out
        return lb, p

    def instance(self, name, store, body, port=0, pin=True):
        path = os.path.join(self.tmp, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"listen: 127.0.0.1:{port}\nlog_dir: {self.tmp}/logs-{name}\n"
                    f"key_dir: {self.tmp}/keys\n{store}\nha:\n  instance_id: {name}\n{body}")
        inst = Instance(self, name, path, PIN_PROXY if pin else [])
        self.instances.append(inst)
        inst.start()
        if self.admin is None:
            self.admin = read(os.path.join(self.tmp, "keys", "admin.key"))
        inst.port = lambda: int(inst.url.rsplit(":", 1)[1])
        return inst

    def etcd_store(self, prefix):
        if self.etcd is None:
            self.etcd = Etcd(self.tmp)
        eps = ", ".join(f'"{e}"' for e in self.etcd.endpoints().split(","))
        return f"store:\n  etcd:\n    endpoints: [{eps}]\n    prefix: {prefix}"

    def loadgen(self, port, key, *args):
        r = subprocess.run(PIN_LOAD + [os.path.join(self.build, "bench", "loadgen"),
                                       "--port", str(port), "--key", key] + list(args),
                           capture_output=True, text=True, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])


def read(path):
    return open(path).read().strip()


def get(port, path, key=None, timeout=5):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data
    except OSError:
        return 0, b""


def post(port, path, body, key, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body),
              headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def stub_deployment(stub_port, extra=""):
    return (f"deployments:\n  - name: stub\n    replicas: 0\n"
            f"    endpoints: [127.0.0.1:{stub_port}]\n    maxOngoingRequests: 4096\n{extra}")


# --- gateway: etcd against SQLite -------------------------------------------

def gateway(b, args):
    stub = b.stub()
    body = stub_deployment(stub) + "tenants:\n  - name: bench\n"
    peers = {
        "sqlite": b.instance("sqlite", 'state: ":memory:"', body),
        "etcd": b.instance("etcd", b.etcd_store("/gw/"), body),
    }
    key = read(os.path.join(b.tmp, "keys", "bench.key"))
    for name, inst in peers.items():
        if not wait(lambda: post(inst.port(), "/v1/chat/completions",
                                 {"model": "stub", "max_tokens": 1,
                                  "messages": [{"role": "user", "content": "hi"}]},
                                 key)[0] == 200, 30):
            raise SystemExit(f"{name} does not serve")
        b.loadgen(inst.port(), key, "--mode", "closed", "--connections", "64",
                  "--duration", "1", "--warmup", "0.5")
    rows = []
    for r in range(args.runs):
        for name, inst in peers.items():
            x = b.loadgen(inst.port(), key, "--mode", "closed", "--connections", "64",
                          "--duration", str(args.seconds))
            rows.append({"peer": name, "kind": "max", **x})
            print(f"run {r + 1} {name:6s} max {x['rps']:8.0f} req/s", flush=True)
    med = {n: statistics.median(x["rps"] for x in rows if x["peer"] == n and x["kind"] == "max")
           for n in peers}
    rate = int(0.5 * med["sqlite"])
    for r in range(args.runs):
        x = b.loadgen(stub, "none", "--mode", "open", "--rate", str(rate),
                      "--connections", "64", "--duration", str(args.seconds))
        rows.append({"peer": "direct", "kind": "latency", **x})
        for name, inst in peers.items():
            x = b.loadgen(inst.port(), key, "--mode", "open", "--rate", str(rate),
                          "--connections", "64", "--duration", str(args.seconds))
            rows.append({"peer": name, "kind": "latency", **x})
    errors = sum(x["errors"] for x in rows)

    def lat(peer, q):
        return statistics.median(x[q + "_us"] for x in rows
                                 if x["peer"] == peer and x["kind"] == "latency")
    out = {"runs": args.runs, "seconds": args.seconds, "connections": 64,
           "max_rps": med, "ratio_etcd_over_sqlite": med["etcd"] / med["sqlite"],
           "target_ratio": 0.95, "latency_rate_rps": rate, "errors": errors,
           "added_latency_us": {p: {q: lat(p, q) - lat("direct", q) for q in ("p50", "p99")}
                                for p in peers},
           "rows": rows}
    out["met"] = out["ratio_etcd_over_sqlite"] >= 0.95 and errors == 0
    print(f"max throughput (median of {args.runs}): SQLite {med['sqlite']:.0f}, etcd "
          f"{med['etcd']:.0f} req/s: {out['ratio_etcd_over_sqlite']:.3f}x (target >= 0.95x)")
    for p in peers:
        a = out["added_latency_us"][p]
        print(f"added latency at {rate} req/s, {p:6s}: p50 {a['p50']:.0f} us, p99 {a['p99']:.0f} us")
    return out


# --- scale: 1, 2, 3 instances behind HAProxy -----------------------------------

def scale(b, args):
    stub = b.stub()
    body = stub_deployment(stub) + "tenants:\n  - name: bench\n"
    store = b.etcd_store("/scale/")
    insts = [b.instance(f"gs{k + 1}", store, body, port=free_port(), pin=False)
             for k in range(3)]
    key = read(os.path.join(b.tmp, "keys", "bench.key"))
    for inst in insts:
        if not wait(lambda: post(inst.port(), "/v1/chat/completions",
                                 {"model": "stub", "max_tokens": 1,
                                  "messages": [{"role": "user", "content": "hi"}]},
                                 key)[0] == 200, 30):
            raise SystemExit(f"{inst.name} does not serve")
    rows = []
    for r in range(args.runs):
        for n in (1, 2, 3):
            lb, hp = b.haproxy([i.port() for i in insts[:n]])
            b.loadgen(lb, key, "--mode", "closed", "--connections", "64",
                      "--duration", "1", "--warmup", "0.5")
            cpu0 = [cpu_seconds(i.proc.pid) for i in insts]
            hp0 = cpu_seconds(hp.pid)
            x = b.loadgen(lb, key, "--mode", "closed", "--connections", "64",
                          "--duration", str(args.seconds), "--warmup", "0")
            cpu = sum(cpu_seconds(i.proc.pid) for i in insts) - sum(cpu0)
            hcpu = cpu_seconds(hp.pid) - hp0
            done = x["requests"]
            rows.append({"instances": n, "rps": x["rps"], "requests": done,
                         "errors": x["errors"],
                         "gpusched_cpu_us_per_request": cpu / max(done, 1) * 1e6,
                         "haproxy_cpu_us_per_request": hcpu / max(done, 1) * 1e6})
            print(f"run {r + 1}: {n} instance(s): {x['rps']:8.0f} req/s, gpusched "
                  f"{rows[-1]['gpusched_cpu_us_per_request']:.0f} us CPU/request, HAProxy "
                  f"{rows[-1]['haproxy_cpu_us_per_request']:.0f} us", flush=True)
            hp.kill()
            hp.wait()
            b.others.remove(hp)
    out = {"runs": args.runs, "seconds": args.seconds, "cores": os.cpu_count(), "by_instances": {}}
    for n in (1, 2, 3):
        mine = [x for x in rows if x["instances"] == n]
        out["by_instances"][n] = {
            "rps": statistics.median(x["rps"] for x in mine),
            "gpusched_cpu_us_per_request": statistics.median(
                x["gpusched_cpu_us_per_request"] for x in mine),
            "haproxy_cpu_us_per_request": statistics.median(
                x["haproxy_cpu_us_per_request"] for x in mine),
            "errors": sum(x["errors"] for x in mine)}
    per = statistics.median(x["gpusched_cpu_us_per_request"] for x in rows)
    hper = statistics.median(x["haproxy_cpu_us_per_request"] for x in rows)
    out["paper_100k_rps"] = {
        "gpusched_cpu_us_per_request": per,
        "gpusched_cores": 1e5 * per / 1e6,
        "haproxy_cores": 1e5 * hper / 1e6,
        "instances_of_4_cores_at_70_percent": -(-1e5 * per / 1e6 // (4 * 0.7)),
    }
    out["rows"] = rows
    p = out["paper_100k_rps"]
    print(f"100k req/s on paper: {p['gpusched_cores']:.1f} cores of gpusched "
          f"({per:.0f} us CPU/request) = {p['instances_of_4_cores_at_70_percent']:.0f} instances "
          f"of 4 cores at 70%, plus {p['haproxy_cores']:.1f} cores of HAProxy")
    return out


# --- prefix: hit rate with 3 instances against 1 -----------------------------------

def mooncake(limit):
    path = os.path.join(ROOT, "testdata", "mooncake-fast25", "conversation_first800.jsonl")
    rows = [json.loads(l) for l in open(path)][:limit]
    return rows


def replay(port, key, rows, seconds):
    """Open loop: request i at its trace time scaled into `seconds`; returns
    the status codes."""
    span = max(1, rows[-1]["timestamp"] - rows[0]["timestamp"])
    start = time.time() + 0.5
    codes = [0] * len(rows)

    def send(i, r):
        delay = start + (r["timestamp"] - rows[0]["timestamp"]) / span * seconds - time.time()
        if delay > 0:
            time.sleep(delay)
        prompt = " ".join(" ".join(f"h{h}t{k}" for k in range(16)) for h in r["hash_ids"])
        try:
            codes[i] = post(port, "/v1/completions",
                            {"model": "chat", "prompt": prompt,
                             "max_tokens": max(1, min(4, r["output_length"]))}, key, 300)[0]
        except OSError:
            codes[i] = 0
    threads = [threading.Thread(target=send, args=(i, r)) for i, r in enumerate(rows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def prefix(b, args):
    rows = mooncake(args.requests)
    results = {"single-least-outstanding": [], "single": [], "three": []}
    for r in range(args.runs):
        for case in results:
            # Fresh engines (empty caches) and instances for every case.
            for e in b.engines:
                e.kill()
                e.wait()
            b.engines.clear()
            for i in b.instances:
                i.kill()
            b.instances.clear()
            ports = [b.ref_engine(["--hidden", "16", "--layers", "1", "--max-model-len",
                                   "8192"])[0] for _ in range(4)]
            policy = "least-outstanding" if case == "single-least-outstanding" else "prefix-affinity"
            body = ("deployments:\n  - name: chat\n    engine: {template: reference}\n"
                    f"    endpoints: [{', '.join(f'127.0.0.1:{p}' for p in ports)}]\n"
                    f"    router: {{policy: {policy}}}\n    maxOngoingRequests: 8\n"
                    "tenants:\n  - name: bench\n")
            store = b.etcd_store(f"/prefix-{r}-{case}/")
            n = 3 if case == "three" else 1
            insts = [b.instance(f"{case}-{r}-{k}", store, body, port=free_port(), pin=False)
                     for k in range(n)]
            key = read(os.path.join(b.tmp, "keys", "bench.key"))
            for inst in insts:
                wait(lambda: post(inst.port(), "/v1/completions",
                                  {"model": "chat", "prompt": "warm", "max_tokens": 1},
                                  key)[0] == 200, 60)
            target = insts[0].port()
            hp = None
            if n == 3:
                target, hp = b.haproxy([i.port() for i in insts])
            # The warm-up requests' prompts are shorter than a block: they
            # count for nothing. Counters from here.
            base = [engine_cache(p) for p in ports]
            codes = replay(target, key, rows, args.seconds)
            after = [engine_cache(p) for p in ports]
            q = sum(a[0] - x[0] for a, x in zip(after, base))
            h = sum(a[1] - x[1] for a, x in zip(after, base))
            ok = sum(1 for c in codes if c == 200)
            results[case].append({"hit_rate": h / max(q, 1), "queried": q, "hits": h,
                                  "ok": ok, "requests": len(rows)})
            print(f"run {r + 1} {case:26s} hit rate {100 * h / max(q, 1):5.1f}% "
                  f"({ok}/{len(rows)} answered)", flush=True)
            if hp:
                hp.kill()
                hp.wait()
                b.others.remove(hp)
    med = {c: statistics.median(x["hit_rate"] for x in v) for c, v in results.items()}
    out = {"runs": args.runs, "requests": len(rows), "seconds": args.seconds,
           "hit_rate": med, "ratio_three_over_single": med["three"] / max(med["single"], 1e-9),
           "target_ratio": 0.9, "results": results}
    out["met"] = out["ratio_three_over_single"] >= 0.9
    print(f"prefix-cache hit rate (median of {args.runs}): 1 instance {100 * med['single']:.1f}%, "
          f"3 instances {100 * med['three']:.1f}%: {out['ratio_three_over_single']:.2f}x "
          f"(target >= 0.9x); 1 instance least-outstanding "
          f"{100 * med['single-least-outstanding']:.1f}%")
    return out


def engine_cache(port):
    _, m = get(port, "/metrics")
    m = m.decode()
    return (metric(m, "vllm:prefix_cache_queries_total"), metric(m, "vllm:prefix_cache_hits_total"))


# --- limits: a tenant's limits with 3 instances ----------------------------------

def paced(port_of, key, rate, seconds, model="stub"):
    """Sends `rate` requests/s for `seconds` (open loop); port_of(i) picks
    the port of request i. Returns the count of 200s."""
    n = int(rate * seconds)
    ok = [0] * n
    start = time.time() + 0.2

    def send(i):
        delay = start + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        try:
            ok[i] = post(port_of(i), "/v1/chat/completions",
                         {"model": model, "max_tokens": 1,
                          "messages": [{"role": "user", "content": "hi"}]}, key, 30)[0] == 200
        except OSError:
            pass
    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(ok)


def concurrent_peak(port, key, workers, seconds, stub):
    """`workers` loops of 1-second streams; the most admitted at once, as the
    upstream (the stub on port `stub`) saw them, and the streams answered."""
    get(stub, "/stub/peak")  # from here
    spans = []
    lock = threading.Lock()
    end = time.time() + seconds

    def loop():
        while time.time() < end:
            t0 = time.time()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("POST", "/v1/chat/completions", body=json.dumps(
                    {"model": "stub", "max_tokens": 50, "stream": True, "stub_gap_us": 20000,
                     "messages": [{"role": "user", "content": "hi"}]}),
                    headers={"Authorization": f"Bearer {key}",
                             "Content-Type": "application/json"})
                r = c.getresponse()
                if r.status == 200:
                    t_head = time.time()
                    r.read()
                    with lock:
                        spans.append((t_head, time.time()))
                else:
                    r.read()
                    time.sleep(0.05)
                c.close()
            except OSError:
                time.sleep(0.05)
    threads = [threading.Thread(target=loop) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return int(get(stub, "/stub/peak")[1]), len(spans)


def limits(b, args):
    stub = b.stub()
    rpm, burst_min, conc = 600, 0.05, 6
    body = stub_deployment(stub) + (
        "tenants:\n  - name: bench\n"
        f"  - name: capped\n    limits: {{requestsPerMinute: {rpm}, burstMinutes: {burst_min}}}\n"
        f"  - name: conc\n    limits: {{maxConcurrency: {conc}}}\n")
    store = b.etcd_store("/limits/")
    insts = [b.instance(f"gs{k + 1}", store, body, port=free_port(), pin=False)
             for k in range(3)]
    capped = read(os.path.join(b.tmp, "keys", "capped.key"))
    concurrent = read(os.path.join(b.tmp, "keys", "conc.key"))
    for inst in insts:
        wait(lambda: post(inst.port(), "/v1/chat/completions",
                          {"model": "stub", "max_tokens": 1,
                           "messages": [{"role": "user", "content": "hi"}]},
                          read(os.path.join(b.tmp, "keys", "bench.key")))[0] == 200, 30)
    lb, _ = b.haproxy([i.port() for i in insts])
    allowed = rpm * burst_min + rpm / 60 * args.seconds
    out = {"runs": args.runs, "seconds": args.seconds, "requests_per_minute": rpm,
           "burst_minutes": burst_min, "offered_per_second": 3 * rpm / 60,
           "allowed_per_run": allowed, "max_concurrency": conc, "rows": []}
    for r in range(args.runs):
        # The buckets refill to their depth between runs.
        time.sleep(60 * burst_min + 2)
        even = paced(lambda i: lb, capped, 3 * rpm / 60, args.seconds)
        time.sleep(60 * burst_min + 2)
        skewed = paced(lambda i: insts[0].port(), capped, 3 * rpm / 60, args.seconds)
        peak, streams = concurrent_peak(lb, concurrent, 4 * conc, min(args.seconds, 30), stub)
        row = {"even_admitted": even, "skewed_admitted": skewed,
               "even_over": even / allowed - 1, "skewed_over": skewed / allowed - 1,
               "concurrency_peak": peak, "concurrency_over": peak / conc - 1,
               "streams": streams}
        out["rows"].append(row)
        print(f"run {r + 1}: rpm limit: {even} admitted through HAProxy, {skewed} all to one "
              f"instance, of {allowed:.0f} allowed; concurrency peak {peak} of {conc} "
              f"({streams} streams)", flush=True)
    for k in ("even_over", "skewed_over", "concurrency_over"):
        out[k] = statistics.median(x[k] for x in out["rows"])
    out["target_over"] = 0.10
    out["met"] = all(out[k] <= 0.10 for k in ("even_over", "skewed_over", "concurrency_over"))
    print(f"over the limit (median of {args.runs}): requests/min through HAProxy "
          f"{100 * out['even_over']:+.1f}%, all to one instance {100 * out['skewed_over']:+.1f}%, "
          f"concurrency {100 * out['concurrency_over']:+.1f}% (target <= +10%)")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("mode", choices=["gateway", "scale", "prefix", "limits"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--requests", type=int, default=800)
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = {"gateway": 5, "scale": 5, "prefix": 60, "limits": 60}[args.mode]
    for tool in ("etcd", "etcdctl", "haproxy", "taskset"):
        if shutil.which(tool) is None:
            print(f"skipped: {tool} is not installed (scripts/install-deps.sh installs it)")
            return 0
    modes = {"gateway": gateway, "scale": scale, "prefix": prefix, "limits": limits}
    run_mode(Serving(os.path.abspath(args.build)), modes[args.mode], args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
