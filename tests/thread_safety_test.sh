#!/usr/bin/env bash
# clang's thread-safety analysis over the drivers that own locks (api/, common/,
# gateway/, net/, runtime/, metrics/, engine/, store/, backends/): every absl::Mutex-guarded
# member (ABSL_GUARDED_BY) is touched only with its mutex held, every
# function marked ABSL_EXCLUSIVE_LOCKS_REQUIRED is called with it. Each
# source file is checked with clang -fsyntax-only and the build's own flags
# (compile_commands.json); a finding fails the test with clang's message.
# The policy core has no locks at all (tests/layering_test.sh).
# Usage: thread_safety_test.sh SOURCE_DIR BUILD_DIR
set -u
src="${1:?usage: thread_safety_test.sh SOURCE_DIR BUILD_DIR}"
build="${2:?usage: thread_safety_test.sh SOURCE_DIR BUILD_DIR}"
clang=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clang" ]; then
  echo "thread_safety: clang++ is not installed (scripts/install-deps.sh installs it)"
  exit 1
fi
[ -f "$build/compile_commands.json" ] || {
  echo "thread_safety: no $build/compile_commands.json"
  exit 1
}
python3 - "$src" "$build" "$clang" <<'PY'
import concurrent.futures, json, os, shlex, subprocess, sys
src, build, clang = sys.argv[1:4]
dirs = ("api", "common", "gateway", "net", "runtime", "metrics", "engine", "store", "backends")
jobs = []
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    f = e["file"]
    rel = os.path.relpath(f, os.path.join(os.path.realpath(src), "src"))
    if rel.split("/")[0] not in dirs or f.endswith("_test.cc"):
        continue
    args = shlex.split(e["command"])[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in ("-c",) or a.startswith("-O") or a == "-g":
            continue
        keep.append(a)
    cmd = [clang, "-fsyntax-only", "-Wno-everything", "-Wthread-safety",
           "-Werror=thread-safety"] + keep
    jobs.append((rel, cmd, e["directory"]))
if not jobs:
    print("thread_safety: no source files found in compile_commands.json")
    sys.exit(1)

def run(job):
    rel, cmd, cwd = job
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return rel, p.returncode, p.stderr

failed = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
    for rel, rc, err in ex.map(run, jobs):
        if rc != 0:
            failed += 1
            print(f"thread_safety: {rel}:\n{err}")
print(f"thread_safety: {len(jobs)} files checked, {failed} with findings")
sys.exit(1 if failed else 0)
PY
