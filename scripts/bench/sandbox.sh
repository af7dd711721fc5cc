#!/usr/bin/env bash
# The linux provider against bare spawns and the other isolators, side by side.
#   bash scripts/bench/sandbox.sh [RUNS] [ITERATIONS] [IDLE_SANDBOXES]
# 1. Hyperfine, each a whole cold process: bare `true`, `cubby exec --
#    true`, bubblewrap with every namespace, `unshare -Urmpn --fork`
#    (ROUNDS rounds, default 3; medians over all runs).
# 2. In one library process (examples/bench_sandbox.rs): a command through a
#    live sandbox vs a bare spawn, `run` of `true`, time to a ready sandbox,
#    memory per idle sandbox.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-200}"
echo "machine: $(nproc) cores, $(uname -r)"
cargo build --quiet --release -p cubby-cli
cubby="${CARGO_TARGET_DIR:-$PWD/target}/release/cubby"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
# Several rounds of the same hyperfine run, so that a burst of noise from
# the machine's neighbours does not land on one command only; medians over
# all rounds (means are at the mercy of a few 30 ms outliers on a VM).
rounds="${ROUNDS:-3}"
for round in $(seq "$rounds"); do
  hyperfine -N --warmup 20 --runs "$runs" --style basic --export-json "$work/round$round.json" \
    "/bin/true" \
    "$cubby exec -- /bin/true" \
    "bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    "unshare -Urmpn --fork /bin/true" >/dev/null 2>"$work/hyperfine.err" ||
    { cat "$work/hyperfine.err" >&2; exit 1; }
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
times = {}
for r in range(1, rounds + 1):
    for res in json.load(open(f"{work}/round{r}.json"))["results"]:
        times.setdefault(res["command"], []).extend(res["times"])
print(f"cold processes: {rounds} rounds x {len(next(iter(times.values()))) // rounds} runs, median (p25-p75) ms")
med = {}
for cmd, t in times.items():
    t.sort()
    med[cmd] = statistics.median(t)
    name = cmd.split(" -- ")[0].rsplit("/", 1)[-1] + (" exec" if " exec " in cmd else "")
    print(f"  {med[cmd]*1e3:6.2f} ({t[len(t)//4]*1e3:.2f}-{t[3*len(t)//4]*1e3:.2f})  {cmd[:60]}")
cubby = next(v for k, v in med.items() if " exec -- " in k)
bwrap = next(v for k, v in med.items() if k.startswith("bwrap"))
print(f"  cubby exec / bwrap = {cubby / bwrap:.2f}")
PY
cd - >/dev/null
cargo run --quiet --release -p cubby --example bench_sandbox -- "${2:-300}" "${3:-200}"
