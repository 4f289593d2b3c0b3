#!/usr/bin/env python3
"""Replays a trace against a gpusched gateway as streaming completions.

Usage: replay.py URL API_KEY TRACE_CSV START_UNIX_TIME > requests.csv

TRACE_CSV is in the Aegaeon format `gpusched sim serve` reads (Request Time
as HH:MM:SS.mmm, Model Name, Input Length, Output Length). Request i is sent
at START + its time with a prompt of `Input Length` distinct words (the
reference engine's tokens) and max_tokens `Output Length`, streamed. Open
loop: one thread per request, so a slow answer never delays the next
arrival. TTFT is the first streamed token, E2E the end of the stream, both
from the scheduled arrival. Prints CSV: deployment,arrival_s,status,ttft_s,
e2e_s,tokens.
"""
import csv
import http.client
import json
import sys
import threading
import time
import urllib.parse


def parse_time(s):
    h, m, sec = s.split(":")
    return int(h) * 3600 + int(m) * 60 + float(sec)


def main():
    url, key, trace, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    u = urllib.parse.urlparse(url)
    rows = []
    with open(trace) as f:
        for r in csv.DictReader(f):
            rows.append((parse_time(r["Request Time"]), r["Model Name"],
                         int(r["Input Length"]), int(r["Output Length"])))
    results = [None] * len(rows)

    def send(i, t, model, n_in, n_out):
        delay = start + t - time.time()
        if delay > 0:
            time.sleep(delay)
        at = start + t
        prompt = " ".join(f"w{i}x{k}" for k in range(n_in))
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": n_out,
                           "stream": True})
        ttft, status, tokens = None, 0, 0
        try:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
            conn.request("POST", "/v1/completions", body,
                         {"Authorization": f"Bearer {key}",
                          "Content-Type": "application/json"})
            resp = conn.getresponse()
            status = resp.status
            while True:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    tokens += 1
                    if ttft is None:
                        ttft = time.time() - at
            conn.close()
        except (OSError, http.client.HTTPException, ValueError):
            status = status or -1
        e2e = time.time() - at
        results[i] = (model, t, status, ttft if ttft is not None else e2e, e2e, tokens)

    threads = [threading.Thread(target=send, args=(i, *row)) for i, row in enumerate(rows)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    w = csv.writer(sys.stdout)
    w.writerow(["deployment", "arrival_s", "status", "ttft_s", "e2e_s", "tokens"])
    for r in results:
        w.writerow([r[0], f"{r[1]:.3f}", r[2], f"{r[3]:.6f}", f"{r[4]:.6f}", r[5]])


if __name__ == "__main__":
    main()
