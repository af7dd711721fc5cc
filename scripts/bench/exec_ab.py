"""Two builds of cubby side by side: `cubby exec -- /bin/true` in WORKSPACE,
N rounds of each, interleaved (the order swapped every round), medians.

    python3 scripts/bench/exec_ab.py OLD_CUBBY NEW_CUBBY WORKSPACE N
"""
import os, subprocess, sys, time, statistics
a, b, ws, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ta, tb = [], []
for i in range(n):
    for binary, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
        t = time.perf_counter()
        subprocess.run([binary, "exec", "--", "/bin/true"], cwd=ws, check=True)
        out.append((time.perf_counter() - t) * 1000)
ma, mb = statistics.median(ta), statistics.median(tb)
print(f"old median {ma:.2f} ms, new median {mb:.2f} ms, new/old {mb/ma:.3f} (n={n} each, interleaved)")
