#!/usr/bin/env bash
# What one placeholder costs, by the file system operation, side by side in
# one run (CPU of this process per operation pair, µs):
#   bash scripts/bench/placeholder_ops.sh [DIR]
# DIR (default: a new directory under the current one) must be on the file
# system of the workspaces measured (the placeholders are made there).
# Pairs, 35 names in turn (a fresh repository's missing protected paths):
# mkdir + rmdir (a directory placeholder, made and removed: `cubby exec`),
# open(O_CREAT|O_EXCL) + unlink (a file placeholder), two renames (a
# directory placeholder moved out of a stash and back: a live sandbox's
# commands), link + unlink, and an lstat of a missing name (the look that
# precedes each).
set -euo pipefail
dir="${1:-}"
cleanup=""
if [ -z "$dir" ]; then
  dir="$(mktemp -d ./placeholder-ops.XXXXXX)"
  cleanup="$dir"
fi
src="$(mktemp -d)"
trap 'rm -rf "$src" ${cleanup:+"$cleanup"}' EXIT
cat >"$src/ops.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
static double cpu(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 + r.ru_stime.tv_usec;
}
int main(int argc, char **argv) {
  const int n = 3500, names = 35;
  char p[64], q[64];
  double t;
  if (chdir(argv[1]) != 0 || mkdir("stash", 0700) != 0) return 1;
  int fd = open("src", O_CREAT | O_EXCL | O_WRONLY, 0400);
  close(fd);
  t = cpu();
  for (int i = 0; i < n; i++) { snprintf(p, 64, "d%d", i % names); mkdir(p, 0600); rmdir(p); }
  printf("mkdir + rmdir (directory placeholder)  %6.1f\n", (cpu() - t) / n);
  t = cpu();
  for (int i = 0; i < n; i++) { snprintf(p, 64, "f%d", i % names); close(open(p, O_CREAT | O_EXCL | O_WRONLY, 0400)); unlink(p); }
  printf("create + unlink (file placeholder)     %6.1f\n", (cpu() - t) / n);
  for (int i = 0; i < names; i++) { snprintf(p, 64, "stash/%d", i); mkdir(p, 0600); }
  t = cpu();
  for (int i = 0; i < n; i++) { snprintf(p, 64, "stash/%d", i % names); snprintf(q, 64, "r%d", i % names); rename(p, q); rename(q, p); }
  printf("rename out of a stash and back         %6.1f\n", (cpu() - t) / n);
  t = cpu();
  for (int i = 0; i < n; i++) { snprintf(p, 64, "l%d", i % names); link("src", p); unlink(p); }
  printf("link + unlink                          %6.1f\n", (cpu() - t) / n);
  t = cpu();
  for (int i = 0; i < n; i++) { struct stat st; snprintf(p, 64, "x%d", i % names); lstat(p, &st); }
  printf("lstat of a missing name                %6.1f\n", (cpu() - t) / n);
  return 0;
}
C
cc -O2 -o "$src/ops" "$src/ops.c"
work="$(mktemp -d "$dir/ops.XXXXXX")"
echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg); $(df -T "$dir" | awk 'NR==2 {print $2}') at $dir; CPU µs per pair:"
"$src/ops" "$work"
rm -rf "$work"
