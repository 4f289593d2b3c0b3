#!/usr/bin/env bash
# docs/control-api.md's table of event kinds (between the event-kinds
# markers) against the kinds the code records: every string literal of the
# form "object.what" (object: deployment, tenant, route, rollout, replica,
# node, manager, request, server, leader, capacity, spot, pool) in the
# non-test sources of the modules that record events, comments left out. A
# kind in one and not the other fails, naming it.
# Usage: event_kinds_test.sh SOURCE_DIR
set -u
src="$1"
source "$(dirname "$0")/lib.sh"

python3 - "$src" >"$tmp/diff" <<'PY'
import pathlib, re, sys
src = pathlib.Path(sys.argv[1])
kind = re.compile(r'"((?:deployment|tenant|route|rollout|replica|node|manager|request|server|leader|capacity|spot|pool)\.[a-z_]+)"')
code = set()
for module in ["runtime", "gateway", "control", "api", "store", "main"]:
    for f in sorted((src / "src" / module).glob("*.[ch]*")):
        if f.name.endswith("_test.cc") or f.suffix not in (".cc", ".h"):
            continue
        for line in f.read_text().splitlines():
            code.update(kind.findall(line.split("//")[0]))
doc = (src / "docs" / "control-api.md").read_text()
table = doc.split("<!-- event-kinds: begin -->")[1].split("<!-- event-kinds: end -->")[0]
docs = set()
for row in table.splitlines():
    if row.startswith("| `"):
        docs.update(re.findall(r"`([a-z_]+\.[a-z_]+)`", row.split("|")[1]))
if len(code) < 40:
    print(f"only {len(code)} kinds found in the code: the scan is broken")
for k in sorted(code - docs):
    print(f"recorded by the code, missing from docs/control-api.md: {k}")
for k in sorted(docs - code):
    print(f"in docs/control-api.md, recorded nowhere in the code: {k}")
print(f"kinds: {len(code)} in the code, {len(docs)} in the docs", file=sys.stderr)
PY
[ -s "$tmp/diff" ] && fail "$(cat "$tmp/diff")"
finish event_kinds
