#!/usr/bin/env bash
# Side-by-side benchmark: `cubby call search` against `rg -F` on a generated tree.
#
# Usage: bash scripts/bench/search.sh
#
# Environment:
#   CUBBY_BENCH_TREE  tree to search; generated there when missing or empty,
#                     reused (and kept) when it already holds files.
#                     Default: a temp dir, removed at the end.
#   CUBBY_BENCH_RUNS  timed runs per command (default 30; 3 warmup runs first).
#   CUBBY_BENCH_JSON  hyperfine JSON export (default target/bench/search.json).
#   CUBBY_BENCH_CUBBY     a cubby binary to measure instead of building
#                         target/release/cubby.
#   CUBBY_BENCH_BASELINE  another cubby binary (an earlier build), timed in
#                         the same hyperfine run and compared.
#
# Needs python3 and cargo; installs ripgrep and hyperfine with apt-get when
# missing. Exits non-zero when a tool fails or when cubby and rg disagree on
# the number of matching lines.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

NEEDLE=NEEDLE_cubby_42
COMMON=config.timeout
RUNS=${CUBBY_BENCH_RUNS:-30}
JSON_OUT=${CUBBY_BENCH_JSON:-$repo/target/bench/search.json}

log() { printf '==> %s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------
for tool in python3 cargo; do
  command -v "$tool" >/dev/null || { echo "search.sh: $tool is required" >&2; exit 1; }
done
missing=()
command -v rg >/dev/null || missing+=(ripgrep)
command -v hyperfine >/dev/null || missing+=(hyperfine)
if ((${#missing[@]})); then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  log "installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# --- build -----------------------------------------------------------------
if [[ -n ${CUBBY_BENCH_CUBBY:-} ]]; then
  CUBBY=$CUBBY_BENCH_CUBBY
else
  log "cargo build --release -p cubby-cli"
  cargo build --release -p cubby-cli
  CUBBY=$repo/target/release/cubby
fi
BASELINE=${CUBBY_BENCH_BASELINE:-}

# --- tree ------------------------------------------------------------------
cleanup=
if [[ -n ${CUBBY_BENCH_TREE:-} ]]; then
  TREE=$CUBBY_BENCH_TREE
else
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/cubby-bench.XXXXXX")
  cleanup=$tmp
  TREE=$tmp/tree
fi
trap 'if [[ -n $cleanup ]]; then rm -rf "$cleanup"; fi' EXIT
if [[ -d $TREE ]] && [[ -n $(ls -A "$TREE") ]]; then
  log "reusing tree $TREE"
else
  log "generating tree in $TREE"
  python3 scripts/bench/gen_tree.py "$TREE" >&2
fi
TREE=$(cd "$TREE" && pwd)

files=$(find "$TREE" -type f | wc -l)
dirs=$(find "$TREE" -mindepth 1 -type d | wc -l)
bytes=$(find "$TREE" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
depth=$(find "$TREE" -type d -printf '%d\n' | sort -n | tail -1)
log "tree: $files files, $dirs dirs (depth up to $depth), $((bytes / 1000000)) MB"

# --- warm the page cache ---------------------------------------------------
log "warming the page cache"
find "$TREE" -type f -print0 | xargs -0 cat >/dev/null
cat "$CUBBY" "$(command -v rg)" >/dev/null

# --- same answers? ----------------------------------------------------------
for lit in "$NEEDLE" "$COMMON"; do
  c=$("$CUBBY" call search "{\"query\":\"$lit\"}" --root "$TREE" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["structured"]["total"])')
  r=$( (rg -F -c "$lit" "$TREE" || true) | awk -F: '{s += $NF} END {print s + 0}')
  log "$lit: cubby $c matching lines, rg $r"
  if [[ $c != "$r" ]]; then
    echo "search.sh: cubby and rg disagree on $lit ($c vs $r)" >&2
    exit 1
  fi
done

# --- benchmark -------------------------------------------------------------
mkdir -p "$(dirname "$JSON_OUT")"
log "hyperfine: $RUNS runs per command, 3 warmup"
cmds=("$CUBBY call search '{\"query\":\"{lit}\"}' --root $TREE" "rg -F {lit} $TREE")
if [[ -n $BASELINE ]]; then
  cmds+=("$BASELINE call search '{\"query\":\"{lit}\"}' --root $TREE")
fi
hyperfine -N --warmup 3 --runs "$RUNS" --output=null \
  -L lit "$NEEDLE,$COMMON" "${cmds[@]}" \
  --export-json "$JSON_OUT"

# --- table -----------------------------------------------------------------
python3 - "$JSON_OUT" "$CUBBY" "$BASELINE" "$NEEDLE" "$COMMON" <<'EOF'
import json, sys

path, cubby, baseline, *lits = sys.argv[1:]
results = json.load(open(path))["results"]
def median_ms(program, lit):
    for r in results:
        if r["parameters"]["lit"] == lit and r["command"].split()[0] == program:
            return r["median"] * 1000
    sys.exit(f"search.sh: no {program} result for {lit} in {path}")
print()
if baseline:
    print(f"baseline: {baseline}")
    print(f"| literal | cubby median (ms) | rg median (ms) | cubby/rg | baseline median (ms) | cubby/baseline |")
    print(f"|---|---:|---:|---:|---:|---:|")
else:
    print(f"| literal | cubby median (ms) | rg median (ms) | cubby/rg |")
    print(f"|---|---:|---:|---:|")
for lit in lits:
    c, r = median_ms(cubby, lit), median_ms("rg", lit)
    row = f"| `{lit}` | {c:.1f} | {r:.1f} | {c / r:.2f}x |"
    if baseline:
        b = median_ms(baseline, lit)
        row += f" {b:.1f} | {c / b:.2f}x |"
    print(row)
print(f"\nhyperfine JSON: {path}")
EOF
