#!/usr/bin/env bash
# Runs the official MCP conformance suite (server scenarios, all suites) against
# `cubby serve` and checks the result against tests/mcp/conformance-baseline.txt.
#
#   tests/mcp/conformance.sh
#
# - Installs the suite and Node 22 (the npm package `node`, which ships the
#   binary) into target/mcp-conformance with the machine's npm, once per
#   pinned version pair.
# - Builds cubby (`cargo build -p cubby-cli`), unless CUBBY_BIN names a binary.
# - Starts `cubby serve` on a free loopback port (port 0, address read from
#   its log) with a temporary workspace, runs the suite, stops the server.
# - Exits 1 if a scenario not in the baseline fails, or if the suite did not
#   report every scenario. A baselined scenario that passes is reported
#   (STALE), not failed.
#
# Results of the last run: target/mcp-conformance/last/ (suite output, server
# log, checks.json per scenario).
set -euo pipefail

NODE_VERSION=22.23.3
CONFORMANCE_VERSION=0.1.16
SUITE=all                 # active + pending scenarios
SERVER_START_TIMEOUT=30   # seconds
SUITE_TIMEOUT=600         # seconds

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BASELINE="${CONFORMANCE_BASELINE:-$ROOT/tests/mcp/conformance-baseline.txt}"
DIR="$ROOT/target/mcp-conformance"
NODE="$DIR/node_modules/node/bin/node"
SUITE_JS="$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
STAMP="$DIR/.installed"
WANT="node@$NODE_VERSION @modelcontextprotocol/conformance@$CONFORMANCE_VERSION"

say() { printf 'conformance: %s\n' "$*"; }
die() { printf 'conformance: %s\n' "$*" >&2; exit 1; }

# --- install (idempotent) ---------------------------------------------------
mkdir -p "$DIR"
install_suite() {
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$NODE" ] && [ -f "$SUITE_JS" ]; then
    return 0
  fi
  command -v npm >/dev/null 2>&1 || die "npm is needed to install the suite"
  say "installing $WANT into $DIR"
  rm -f "$STAMP"
  # The `node` package installs the binary by a preinstall script (its
  # node-<os>-<arch> dependency, also from npm); scripts must be on.
  # The registry fails now and then for a minute: try again after 10, 30 and
  # 60 seconds before giving up.
  local pause
  for pause in 10 30 60 give-up; do
    (cd "$DIR" && npm install --prefix "$DIR" --no-audit --no-fund --save-exact --ignore-scripts=false \
        --loglevel=error $WANT) && break
    [ "$pause" = give-up ] && die "npm install failed (4 tries)"
    say "npm install failed; trying again in ${pause}s"
    sleep "$pause"
  done
  [ -x "$NODE" ] || die "node@$NODE_VERSION installed no binary at $NODE"
  [ -f "$SUITE_JS" ] || die "the suite is not at $SUITE_JS"
  printf '%s' "$WANT" >"$STAMP"
}
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DIR/.lock"
  flock 9
  install_suite
  flock -u 9
else
  install_suite
fi
got="$("$NODE" --version)"
[ "$got" = "v$NODE_VERSION" ] || die "expected node v$NODE_VERSION, $NODE says $got"

# --- cubby -------------------------------------------------------------------
if [ -z "${CUBBY_BIN:-}" ]; then
  say "building cubby"
  (cd "$ROOT" && cargo build -q -p cubby-cli) || die "cargo build failed"
  CUBBY_BIN="$ROOT/target/debug/cubby"
fi
[ -x "$CUBBY_BIN" ] || die "no cubby binary at $CUBBY_BIN"

# --- run ---------------------------------------------------------------------
LAST="$DIR/last"
rm -rf "$LAST"
mkdir -p "$LAST/results"
WORKSPACE="$(mktemp -d "${TMPDIR:-/tmp}/cubby-conformance.XXXXXX")"
printf 'seed\n' >"$WORKSPACE/seed.txt"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORKSPACE"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SERVER_LOG="$LAST/server.log"
# Port 0: the kernel picks a free port; cubby_mcp logs the bound address.
RUST_LOG=cubby_mcp=info NO_COLOR=1 "$CUBBY_BIN" serve --listen 127.0.0.1:0 \
  --root "$WORKSPACE" --provider local </dev/null >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
URL=""
for _ in $(seq $((SERVER_START_TIMEOUT * 10))); do
  URL="$(grep -oE 'listening on http://127\.0\.0\.1:[1-9][0-9]*/mcp' "$SERVER_LOG" | head -n1 | sed 's/^listening on //' || true)"
  [ -n "$URL" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_LOG" >&2; die "cubby serve exited"; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$SERVER_LOG" >&2; die "cubby serve did not report its address in ${SERVER_START_TIMEOUT}s"; }
say "cubby serve at $URL (workspace $WORKSPACE)"

SUITE_LOG="$LAST/suite.log"
start=$(date +%s)
set +e
(cd "$LAST" && timeout "$SUITE_TIMEOUT" "$NODE" "$SUITE_JS" server --url "$URL" --suite "$SUITE" \
  -o "$LAST/results") >"$SUITE_LOG" 2>&1
suite_rc=$?
set -e
secs=$(( $(date +%s) - start ))
[ "$suite_rc" -ne 124 ] || { cat "$SUITE_LOG"; die "the suite timed out after ${SUITE_TIMEOUT}s"; }
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  cat "$SUITE_LOG"; cat "$SERVER_LOG" >&2; die "cubby serve died during the suite"
fi

# --- verdict -----------------------------------------------------------------
declare -A baseline=()
while IFS= read -r line || [ -n "$line" ]; do
  id="${line%%#*}"
  id="$(printf '%s' "$id" | tr -d '[:space:]')"
  [ -n "$id" ] && baseline["$id"]=1
done <"$BASELINE"

expected="$(grep -oE '^Running [a-z]+ suite \(([0-9]+) scenarios\)' "$SUITE_LOG" | grep -oE '[0-9]+' | head -n1 || true)"
[ -n "$expected" ] || { cat "$SUITE_LOG"; die "the suite did not start (exit $suite_rc)"; }

declare -A seen=()
pass=0; fail=0; based=0; stale=0; total=0
unexpected=()
table=""
while IFS= read -r line; do
  mark="${line%% *}"
  rest="${line#* }"
  id="${rest%%:*}"
  counts="${rest#*: }"
  seen["$id"]=1
  total=$((total + 1))
  if [ "$mark" = "✓" ]; then
    if [ -n "${baseline[$id]:-}" ]; then
      verdict="STALE"; stale=$((stale + 1))
    else
      verdict="PASS"; pass=$((pass + 1))
    fi
  else
    if [ -n "${baseline[$id]:-}" ]; then
      verdict="BASELINED"; based=$((based + 1))
    else
      verdict="FAIL"; fail=$((fail + 1)); unexpected+=("$id")
    fi
  fi
  table+="$(printf '  %-10s %-32s %s' "$verdict" "$id" "$counts")"$'\n'
done < <(grep -E '^(✓|✗) [^:]+: [0-9]+ passed, [0-9]+ failed$' "$SUITE_LOG")

say "suite $CONFORMANCE_VERSION on node $got, $total scenarios in ${secs}s"
printf '%s' "$table"
for id in "${!baseline[@]}"; do
  [ -n "${seen[$id]:-}" ] || say "note: baselined scenario '$id' was not run by this suite version"
done
[ "$stale" -eq 0 ] || say "note: $stale baselined scenario(s) now pass (STALE): remove them from $BASELINE"

status=0
if [ "$total" -ne "$expected" ]; then
  say "the suite announced $expected scenarios but reported $total (exit $suite_rc)"
  cat "$SUITE_LOG"
  status=1
fi
if [ "$fail" -gt 0 ]; then
  say "unexpected failures: ${unexpected[*]}"
  for id in "${unexpected[@]}"; do
    for f in "$LAST"/results/server-"$id"-*/checks.json; do
      [ -f "$f" ] || continue
      "$NODE" -e '
        const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        for (const c of checks) if (c.status === "FAILURE")
          console.log(`  ${process.argv[2]}: ${c.id}: ${c.errorMessage || c.description}`);
      ' "$f" "$id"
    done
  done
  say "server log: $SERVER_LOG"
  status=1
fi
say "$pass pass, $fail unexpected failures, $based baselined, $stale stale"
exit "$status"
