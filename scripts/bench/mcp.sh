#!/usr/bin/env bash
# Side-by-side benchmark: `cubby mcp` against the reference MCP filesystem
# server (@modelcontextprotocol/server-filesystem, npm) on the same client
# workload, in one run: small-file reads (one at a time and pipelined),
# directory listings (pipelined and one at a time), peak RSS of each server.
#
# Usage: bash scripts/bench/mcp.sh [mcp_client.py options]
#   e.g. bash scripts/bench/mcp.sh --rounds 5 --repeat 3
#
# Environment:
#   CUBBY_BENCH_JSON  raw figures (default target/bench/mcp.json).
#   CUBBY_BENCH_CUBBY     a cubby binary to measure instead of building
#                         target/release/cubby.
#   CUBBY_BENCH_BASELINE  another cubby binary (an earlier build), run
#                         alternately with the others and compared.
#
# Needs python3 (stdlib only), cargo, node >= 20 and npm. The reference server
# is installed (pinned, idempotently) into target/bench-node; with an older
# node, the npm package node@22 is installed there too and used. The client
# (scripts/bench/mcp_client.py) starts node directly on the package's entry
# point, so the RSS sampled is the server's, not an npx wrapper's.
# Exits non-zero when a server fails to start or any answer is not a
# successful result with the expected content.
set -euo pipefail

REF_PACKAGE=@modelcontextprotocol/server-filesystem
REF_VERSION=2026.8.31
NODE_FALLBACK=node@22

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
NODE_DIR=$repo/target/bench-node
JSON_OUT=${CUBBY_BENCH_JSON:-$repo/target/bench/mcp.json}

log() { printf '==> %s\n' "$*" >&2; }

for tool in python3 cargo npm; do
  command -v "$tool" >/dev/null || { echo "mcp.sh: $tool is required" >&2; exit 1; }
done

# --- node -------------------------------------------------------------------
mkdir -p "$NODE_DIR"
[[ -f $NODE_DIR/package.json ]] || echo '{"name": "cubby-bench-node", "private": true}' >"$NODE_DIR/package.json"
npm_install() {
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --save-exact --loglevel=error "$@" >&2
}
NODE=$(command -v node || true)
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [[ -z $NODE ]] || (($(node_major "$NODE") < 20)); then
  NODE=$NODE_DIR/node_modules/node/bin/node
  if [[ ! -x $NODE ]]; then
    log "node >= 20 not found; installing $NODE_FALLBACK into $NODE_DIR"
    npm_install "$NODE_FALLBACK"
  fi
fi
log "node $("$NODE" --version) ($NODE)"

# --- reference server (pinned, idempotent) ---------------------------------------
REF_DIR=$NODE_DIR/node_modules/$REF_PACKAGE
installed=$("$NODE" -p "require('$REF_DIR/package.json').version" 2>/dev/null || true)
if [[ $installed != "$REF_VERSION" ]]; then
  log "installing $REF_PACKAGE@$REF_VERSION into $NODE_DIR"
  npm_install "$REF_PACKAGE@$REF_VERSION"
fi
REF_ENTRY=$REF_DIR/$("$NODE" -p "const b = require('$REF_DIR/package.json').bin; typeof b === 'string' ? b : Object.values(b)[0]")
[[ -f $REF_ENTRY ]] || { echo "mcp.sh: no entry point at $REF_ENTRY" >&2; exit 1; }
log "$REF_PACKAGE $REF_VERSION: $REF_ENTRY"

# --- cubby -----------------------------------------------------------------------
if [[ -n ${CUBBY_BENCH_CUBBY:-} ]]; then
  CUBBY=$CUBBY_BENCH_CUBBY
else
  log "cargo build --release -p cubby-cli"
  cargo build --release -p cubby-cli
  CUBBY=$repo/target/release/cubby
fi

# --- fixture: 200 small files in 21 directories ------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cubby-mcp-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
FIXTURE=$tmp/workspace
python3 - "$FIXTURE" <<'EOF'
import os, random, sys

root = sys.argv[1]
rng = random.Random(42)
words = "alpha beta gamma delta config value return function module import test data".split()
def text(lines):
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))) + "\n"
                   for _ in range(lines))
for d in range(10):
    sub = os.path.join(root, f"pkg{d:02}", "nested")
    os.makedirs(sub)
    for f in range(18):
        with open(os.path.join(root, f"pkg{d:02}", f"file{f:02}.txt"), "w") as fh:
            fh.write(text(rng.randint(3, 30)))
    with open(os.path.join(sub, "leaf.md"), "w") as fh:
        fh.write(text(5))
for f in range(10):
    with open(os.path.join(root, f"top{f:02}.txt"), "w") as fh:
        fh.write(text(rng.randint(1, 10)))
EOF
files=$(find "$FIXTURE" -type f | wc -l)
dirs=$(find "$FIXTURE" -type d | wc -l)
bytes=$(find "$FIXTURE" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
log "fixture $FIXTURE: $files files ($((bytes / files)) B avg), $dirs directories"
cat "$CUBBY" "$NODE" >/dev/null # warm the page cache for both binaries

# --- run both, side by side --------------------------------------------------------
log "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
baseline=()
if [[ -n ${CUBBY_BENCH_BASELINE:-} ]]; then
  baseline=(--baseline "$(printf '%q mcp --root %q --provider local' "$CUBBY_BENCH_BASELINE" "$FIXTURE")")
fi
python3 "$repo/scripts/bench/mcp_client.py" \
  --fixture "$FIXTURE" \
  --reference "$(printf '%q %q %q' "$NODE" "$REF_ENTRY" "$FIXTURE")" \
  --cubby "$(printf '%q mcp --root %q --provider local' "$CUBBY" "$FIXTURE")" \
  --json "$JSON_OUT" \
  "${baseline[@]}" \
  "$@"
