#!/usr/bin/env bash
# Issue 13's four figures for builds of cubby side by side, in one run:
#   ROUNDS=3 bash scripts/bench/issue13_side_by_side.sh OLD... NEW
# Each DIR holds release builds of `cubby` and `bench_sandbox` (cargo build
# --release -p cubby-cli --bin cubby -p cubby --example bench_sandbox, then
# copy target/release/{cubby,examples/bench_sandbox}); the first is the
# baseline of the ratios. Every round runs each figure for every build in
# turn (interleaved, so that the neighbours' load falls on all alike):
#   1. `cubby exec -- /bin/true` in a fresh git repository and bubblewrap,
#      EXEC_RUNS runs each, one of each in turn: wall time, and the CPU of
#      the `cubby` process (its rusage);
#   2. `perf stat -e task-clock` of `cubby exec -- /bin/true`, the whole
#      tree (holder and command too), when `perf` is there;
#   3. `bench_sandbox ITERATIONS IDLE` (default 300 200): a command through
#      a live sandbox against a bare spawn, the ready time (open + start),
#      the memory of an idle sandbox.
# Then, once per build, the syscalls of the whole tree (`strace -f -c`: the
# server's threads, the holder, the command)
# and how many of them are `landlock_add_rule`, when `strace` is there.
# Prints, per figure and build, the median over the rounds with the range
# (min-max), and the ratio to the first build; the load average at the
# start and the end.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: ROUNDS=3 [EXEC_RUNS=100] [ARGS='300 200'] $0 OLD... NEW" >&2; exit 2; }
rounds="${ROUNDS:-3}"
exec_runs="${EXEC_RUNS:-100}"
read -r -a args <<<"${ARGS:-300 200}"
dirs=()
for d in "$@"; do
  d=$(cd "$d" && pwd)
  for b in cubby bench_sandbox; do
    [ -x "$d/$b" ] || { echo "$0: $d/$b missing" >&2; exit 2; }
  done
  dirs+=("$d")
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git init -q "$work/repo"
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds, exec $exec_runs runs, bench_sandbox ${args[*]}"
bw="bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true"
for r in $(seq "$rounds"); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$work/repo" && python3 - "$exec_runs" "$work/exec.$r" "${dirs[@]}" <<'PY'
import os, statistics, sys
runs, out, dirs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
cmds = [[f"{d}/cubby", "exec", "--", "/bin/true"] for d in dirs]
cmds.append(["/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "/bin/true"])
import time
wall = [[] for _ in cmds]; cpu = [[] for _ in cmds]
null = os.open("/dev/null", os.O_RDWR)
for i in range(runs + 5):
    for k, argv in enumerate(cmds):
        t = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, null, 0)])
        _, status, ru = os.wait4(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, argv
        if i >= 5:
            wall[k].append(time.perf_counter() - t); cpu[k].append(ru.ru_utime + ru.ru_stime)
with open(out, "w") as f:
    for k in range(len(cmds)):
        f.write(f"{statistics.median(wall[k])*1e3:.3f} {statistics.median(cpu[k])*1e3:.3f}\n")
PY
  )
  if command -v perf >/dev/null; then
    for i in "${!dirs[@]}"; do
      (cd "$work/repo" && perf stat -x, -e task-clock -r 20 "${dirs[$i]}/cubby" exec -- /bin/true 2>&1 >/dev/null) \
        | awk -F, '/task-clock/ {print $1}' >"$work/perf.$i.$r"
    done
  fi
  for i in "${!dirs[@]}"; do
    (cd /tmp && "${dirs[$i]}/bench_sandbox" "${args[@]}") >"$work/bench.$i.$r" 2>&1
  done
done
if command -v strace >/dev/null; then
  for i in "${!dirs[@]}"; do
    (cd "$work/repo" && strace -f -c -o "$work/strace.$i" "${dirs[$i]}/cubby" exec -- /bin/true)
  done
fi
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$rounds" "${dirs[@]}" <<'PY'
import os, re, statistics, sys
work, rounds, dirs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
n = len(dirs)
rows = []  # (label, [values per build per round])
def add(label, per_build):
    rows.append((label, per_build))
exec_ = [[list(map(float, l.split())) for l in open(f"{work}/exec.{r}")] for r in range(1, rounds + 1)]
add("cubby exec -- /bin/true, wall (ms)", [[e[i][0] for e in exec_] for i in range(n)])
add("  CPU of the cubby process (ms)", [[e[i][1] for e in exec_] for i in range(n)])
add("  / bubblewrap's wall in the same round", [[e[i][0] / e[n][0] for e in exec_] for i in range(n)])
bwrap = [e[n][0] for e in exec_]
if os.path.exists(f"{work}/perf.0.1"):
    add("  perf task-clock, whole tree (ms)",
        [[float(open(f"{work}/perf.{i}.{r}").read().strip() or "nan") for r in range(1, rounds + 1)] for i in range(n)])
pats = [
    ("live sandbox /bin/true (ms)", r"live sandbox /bin/true\s+([\d.]+)"),
    ("  x bare spawn", r"live sandbox /bin/true\s+[\d.]+\s+([\d.]+)x"),
    ("run `true`, linux provider (ms)", r"run `true`, linux provider\s+([\d.]+)"),
    ("ready: open + start (ms)", r"open \+ start \(ready\)\s+([\d.]+)"),
    ("idle sandbox (KiB per sandbox)", r"= ([\d.]+) KiB per sandbox"),
]
bench = [[open(f"{work}/bench.{i}.{r}").read() for r in range(1, rounds + 1)] for i in range(n)]
for label, pat in pats:
    add(label, [[float(re.search(pat, t).group(1)) for t in bench[i]] for i in range(n)])
def show(v):
    m = statistics.median(v)
    return f"{m:.2f} ({min(v):.2f}-{max(v):.2f})" if m < 100 else f"{m:.1f} ({min(v):.1f}-{max(v):.1f})"
names = [os.path.basename(d.rstrip("/")) or d for d in dirs]
print()
print("| median (min-max) of %d rounds | %s | %s |" % (rounds, " | ".join(names), " | ".join(f"{x} / {names[0]}" for x in names[1:])))
print("|---|" + "---:|" * (2 * n - 1))
for label, per in rows:
    meds = [statistics.median(v) for v in per]
    ratios = [f"{m / meds[0]:.2f}" for m in meds[1:]]
    print(f"| {label} | " + " | ".join(show(v) for v in per) + " | " + " | ".join(ratios) + " |")
print(f"| bubblewrap, wall (ms) | {show(bwrap)} |" + " |" * (2 * n - 2))
if os.path.exists(f"{work}/strace.0"):
    tot, ll = [], []
    for i in range(n):
        text = open(f"{work}/strace.{i}").read()
        calls = {l.split()[-1]: l.split()[3] for l in text.splitlines()
                 if len(l.split()) >= 5 and l.split()[0][0].isdigit()}
        tot.append(calls.get("total", "?"))
        ll.append(calls.get("landlock_add_rule", "0"))
    print("| syscalls of the whole tree (strace -f -c) | " + " | ".join(tot) + " |" + " |" * (n - 1))
    print("|   of which landlock_add_rule | " + " | ".join(ll) + " |" + " |" * (n - 1))
for i, d in enumerate(dirs):
    print(f"  {names[i]} = {d}")
PY
