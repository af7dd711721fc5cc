#!/usr/bin/env bash
# Builds an OCI image of cubby: a root file system made from Debian's
# packages (mmdebstrap, no registry pulls) plus the cubby binary, running as
# the non-root uid 65532, written as an OCI image layout by umoci.
#
#   deploy/image/build.sh [--binary PATH] [--out DIR] [--tag TAG]
#                         [--cache DIR] [--suite SUITE]
#
#   --binary PATH  the cubby binary to ship; default: builds it with
#                  `cargo build --release -p cubby-cli --locked`
#   --out DIR      where the OCI layout goes (made anew); default:
#                  target/image/oci
#   --tag TAG      the image's reference name in the layout; default: cubby
#   --cache DIR    where root file systems are kept, keyed by suite and
#                  package list; default: target/image-cache
#   --suite SUITE  Debian release of the root file system; default: this
#                  machine's (the binary links this machine's glibc, so the
#                  image's must be at least as new)
#
# Needs: mmdebstrap and umoci (Debian packages), root or a user with
# subordinate ids (mmdebstrap's unshare mode), Debian's package mirror.
# Load the result with `podman pull oci:DIR:TAG` or `skopeo copy
# oci:DIR:TAG docker://REGISTRY/cubby:TAG`. It prints the layout's path and
# the manifest digest on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

# The user the image runs as (numeric, so `runAsNonRoot` can check it
# without reading /etc/passwd).
readonly UID_GID=65532
# The port `cubby serve` listens on in the image's default command.
readonly PORT=8765
# What a useful sandbox has besides Debian's essential set (bash,
# coreutils, findutils, grep, sed, diffutils, tar, gzip, util-linux, ...).
readonly PACKAGES=(ca-certificates curl git less patch procps python3 xz-utils)
# Bump to rebuild cached root file systems when the recipe below changes.
readonly RECIPE=1

binary=""
out="$repo/target/image/oci"
tag="cubby"
cache="$repo/target/image-cache"
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --suite) suite="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in mmdebstrap umoci sha256sum tar; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build.sh: $tool is missing: apt-get install mmdebstrap umoci" >&2
    exit 1
  fi
done

if [ -z "$binary" ]; then
  (cd "$repo" && cargo build --release -p cubby-cli --locked)
  binary="$repo/target/release/cubby"
fi
if [ ! -x "$binary" ]; then
  echo "build.sh: $binary is not an executable file" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cubby-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# --- the root file system, cached by what goes into it -------------------
key="$(printf '%s\n' "recipe=$RECIPE" "suite=$suite" "uid=$UID_GID" "${PACKAGES[@]}" \
  | sha256sum | cut -c1-16)"
rootfs="$cache/rootfs-$suite-$key.tar"
if [ ! -s "$rootfs" ]; then
  mkdir -p "$cache"
  include="$(IFS=,; echo "${PACKAGES[*]}")"
  # The customize hook runs with the new root as $1: the user, its home,
  # the workspace and /tmp; no package database or apt state is shipped.
  mmdebstrap --variant=essential --include="$include" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="echo 'cubby:x:$UID_GID:$UID_GID:cubby:/home/cubby:/bin/bash' >> \"\$1/etc/passwd\"" \
    --customize-hook="echo 'cubby:x:$UID_GID:' >> \"\$1/etc/group\"" \
    --customize-hook="echo 'cubby:!:1::::::' >> \"\$1/etc/shadow\"" \
    --customize-hook="install -d -m 0755 -o $UID_GID -g $UID_GID \"\$1/home/cubby\" \"\$1/workspace\"" \
    --customize-hook="chmod 1777 \"\$1/tmp\"" \
    --customize-hook="rm -rf \"\$1/var/cache/apt\"/* \"\$1/var/lib/apt/lists\"/* \"\$1/var/log\"/*" \
    "$suite" "$work/rootfs.tar"
  mv "$work/rootfs.tar" "$rootfs.part"
  mv "$rootfs.part" "$rootfs"
fi

# --- the binary's layer ---------------------------------------------------
mkdir -p "$work/bin/usr/local/bin"
install -m 0755 "$binary" "$work/bin/usr/local/bin/cubby"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work/bin" -cf "$work/cubby.tar" usr

# --- the OCI layout -------------------------------------------------------
layout="$work/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci raw add-layer --image "$layout:$tag" --history.created_by "mmdebstrap $suite ${PACKAGES[*]}" "$rootfs"
umoci raw add-layer --image "$layout:$tag" --history.created_by "cubby binary" "$work/cubby.tar"
umoci config --image "$layout:$tag" \
  --config.user "$UID_GID:$UID_GID" \
  --config.workingdir /workspace \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --config.env HOME=/home/cubby \
  --config.entrypoint /usr/local/bin/cubby \
  --config.cmd serve --config.cmd --listen --config.cmd "0.0.0.0:$PORT" \
  --config.cmd --root --config.cmd /workspace \
  --config.exposedports "$PORT/tcp" \
  --config.label "org.opencontainers.image.title=cubby" \
  --config.label "org.opencontainers.image.description=cubby serve: sandboxed tools for AI agents over MCP" \
  --history.created_by "umoci config"
umoci gc --layout "$layout"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$layout" "$out"
digest="$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$out/index.json")"
echo "built $out:$tag $digest"
