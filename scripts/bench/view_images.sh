#!/usr/bin/env bash
# view_file on large images: peak RSS (GNU time's %M), wall time, and what was
# sent, for each image scripts/bench/view_images/ writes (into a temp dir,
# removed afterwards). CUBBY=path picks the binary (default: a debug build,
# whose dependencies are built with opt-level 3 like the tests').
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cubby=${CUBBY:-$repo/target/debug/cubby}
[ -x "$cubby" ] || cargo build -p cubby-cli --manifest-path "$repo/Cargo.toml"
gen_target=$repo/target/bench/view_images
cargo build --release --quiet --manifest-path "$repo/scripts/bench/view_images/Cargo.toml" \
    --target-dir "$gen_target"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$gen_target/release/view-images-bench" "$dir"
for f in $(ls "$dir" | sort); do
    size=$(stat -c %s "$dir/$f")
    out=$( { /usr/bin/time -f "TIME %M %e" "$cubby" call view_file "{\"path\":\"$f\"}" \
        --root "$dir" --provider local 2>&1 || true; } | grep -v ' WARN ')
    rss_kb=$(sed -n 's/^TIME \([0-9]*\) .*/\1/p' <<<"$out")
    wall=$(sed -n 's/^TIME [0-9]* \(.*\)/\1/p' <<<"$out")
    text=$(grep -v '^TIME\|^Command exited' <<<"$out" | cut -c1-160)
    printf '%s\t%s bytes\tpeak %s MiB\t%s s\t%s\n' "$f" "$size" "$((rss_kb / 1024))" "$wall" "$text"
done
