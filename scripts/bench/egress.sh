#!/usr/bin/env bash
# Egress proxy throughput: one large download over loopback, side by side:
#   host   curl → server                          (no sandbox, no proxy)
#   cubby  curl in a linux sandbox (network allow) → egress proxy → server
# Usage: bash scripts/bench/egress.sh [MiB] [runs]   (default 256 MiB, 5 runs)
#   INJECT=1   bind a secret to localhost ([[network.inject]]): the download
#              then passes through the proxy's swap-back (value → placeholder)
#   CUBBY=path use that cubby binary instead of building a release one
# Needs curl and python3. Prints MiB/s per run and the medians; also the
# cubby process's peak RSS (VmHWM), which must stay bounded whatever the size.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
MIB=${1:-256}
RUNS=${2:-5}
if [[ -z ${CUBBY:-} ]]; then
  cargo build --release -q -p cubby-cli --manifest-path "$repo/Cargo.toml"
  CUBBY=$repo/target/release/cubby
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cubby-egress-bench.XXXXXX")
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/www" "$tmp/ws"
head -c "$((MIB * 1024 * 1024))" /dev/urandom > "$tmp/www/big"
python3 -m http.server --bind 127.0.0.1 0 --directory "$tmp/www" > "$tmp/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 50); do
  port=$(grep -oE 'port [0-9]+' "$tmp/server.log" | head -1 | cut -d' ' -f2 || true)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "egress.sh: the server did not start" >&2; exit 1; }
cat > "$tmp/ws/cubby.toml" <<TOML
[network]
mode = "allow"
allowed_domains = ["localhost"]
allowed_cidrs = ["127.0.0.0/8", "::1/128"]
TOML
if [[ ${INJECT:-0} == 1 ]]; then
  cat >> "$tmp/ws/cubby.toml" <<TOML
[[network.inject]]
secret = "CUBBY_BENCH_TOKEN"
hosts = ["localhost"]
TOML
  export CUBBY_BENCH_TOKEN=bench-token-0123456789abcdef
fi
url=http://localhost:$port/big
speeds_host=()
speeds_cubby=()
for i in $(seq "$RUNS"); do
  h=$(curl -s -o /dev/null -w '%{speed_download}' "$url")
  # --noproxy '': NO_PROXY keeps localhost inside the sandbox otherwise.
  c=$(cd "$tmp/ws" && /usr/bin/time -f '%M' -o "$tmp/rss" \
      "$CUBBY" exec --root "$tmp/ws" --network allow -- \
      curl -s -o /dev/null --noproxy '' -w '%{speed_download}' "$url")
  rss_kib=$(cat "$tmp/rss")
  speeds_host+=("$h")
  speeds_cubby+=("$c")
  printf 'run %d: host %.0f MiB/s, through the proxy %.0f MiB/s (cubby peak RSS %d KiB)\n' \
    "$i" "$(echo "$h / 1048576" | bc -l)" "$(echo "$c / 1048576" | bc -l)" "$rss_kib"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mh=$(median "${speeds_host[@]}")
mc=$(median "${speeds_cubby[@]}")
printf 'median (%d MiB, %d runs): host %.0f MiB/s, through the proxy %.0f MiB/s (%.2f of host)\n' \
  "$MIB" "$RUNS" "$(echo "$mh / 1048576" | bc -l)" "$(echo "$mc / 1048576" | bc -l)" "$(echo "$mc / $mh" | bc -l)"
