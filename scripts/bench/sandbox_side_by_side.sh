#!/usr/bin/env bash
# Builds of cubby side by side in one run, in a fresh git repository:
#   bash scripts/bench/sandbox_side_by_side.sh DIR...
# Each DIR holds a release `cubby` and `bench_sandbox` (the example). Runs
# hyperfine (3 rounds x 150 runs, medians over all) of `cubby exec --
# /bin/true` of each build and bubblewrap, then the same interleaved (300
# rounds, one of each in turn), then `bench_sandbox 300 200` of each.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR..." >&2; exit 2; }
dirs=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git init -q "$work/repo"
cd "$work/repo"
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
bw="bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true"
cmds=("/bin/true")
for d in "${dirs[@]}"; do cmds+=("$d/cubby exec -- /bin/true"); done
cmds+=("$bw")
for round in 1 2 3; do
  hyperfine -N --warmup 20 --runs 150 --style none --export-json "$work/round$round.json" \
    "${cmds[@]}" >/dev/null 2>"$work/hyperfine.err" || { cat "$work/hyperfine.err" >&2; exit 1; }
done
python3 - "$work" <<'PY'
import json, statistics, sys
times = {}
for r in (1, 2, 3):
    for res in json.load(open(f"{sys.argv[1]}/round{r}.json"))["results"]:
        times.setdefault(res["command"], []).extend(res["times"])
med = {}
for cmd, t in times.items():
    t.sort(); med[cmd] = statistics.median(t)
    print(f"  {med[cmd]*1e3:6.2f} ({t[len(t)//4]*1e3:.2f}-{t[3*len(t)//4]*1e3:.2f})  {cmd[:70]}")
bw = next(v for k, v in med.items() if k.startswith("bwrap"))
for k, v in med.items():
    if " exec " in k:
        print(f"  {k.split()[0]} / bwrap = {v / bw:.2f}")
PY
python3 - "${cmds[@]:1}" <<'PY'
import os, statistics, sys, time
cmds = [c.split() for c in sys.argv[1:]]
cmds[-1][0] = "/usr/bin/" + cmds[-1][0]
times = [[] for _ in cmds]
cpu = [[] for _ in cmds]
null = os.open("/dev/null", os.O_RDWR)
for r in range(305):
    for i, argv in enumerate(cmds):
        t = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, null, 0)])
        _, status, ru = os.wait4(pid, 0)
        if r >= 5:
            times[i].append(time.perf_counter() - t)
            cpu[i].append(ru.ru_utime + ru.ru_stime)
        assert os.waitstatus_to_exitcode(status) == 0, argv
print("interleaved, 300 rounds (median, p25-p75; CPU of the process)")
for i, argv in enumerate(cmds):
    t = sorted(times[i])
    print(f"  {statistics.median(t)*1e3:6.2f} ({t[75]*1e3:.2f}-{t[225]*1e3:.2f}) cpu {statistics.median(cpu[i])*1e3:.2f} ms  {' '.join(argv)[:60]}")
PY
cd /tmp
for d in "${dirs[@]}"; do
  echo "== $d"
  "$d/bench_sandbox" 300 200
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
