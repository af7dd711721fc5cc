#!/usr/bin/env python3
"""Scale of one `cubby serve --host` (SPEC §7, issue 18), stdlib only.

Starts the server (port 0, its address read from stderr) and measures, in
one run:
  1. memory of N idle sandboxes: the server's PSS (smaps_rollup) plus every
     process under it, before and after creating N sandboxes; per sandbox;
  2. create -> first output byte of `echo hi` (a new sandbox each time,
     destroyed after) with the N idle ones alive: p50 / p99;
  3. commands/s with C concurrent clients (each its own sandbox and
     connection, `true` in a loop for a fixed time);
  4. processes under the server after every sandbox is destroyed (must be 0).

usage: host_scale.py CUBBY_BIN [--idle 1000] [--latency 300] [--clients 100]
                     [--seconds 10] [--provider linux]
"""
import argparse, http.client, json, os, re, statistics, struct, subprocess, sys
import tempfile, threading, time


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


class Client:
    def __init__(self, addr, token):
        host, port = addr.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.auth = {"Authorization": f"Bearer {token}"}

    def call(self, method, path, body=None):
        headers = dict(self.auth)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=headers)
            return self.conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # The server closes a connection idle past its header timeout
            # (10 s); the request was not taken: send it on a new one.
            self.conn.close()
            self.conn.request(method, path, body=data, headers=headers)
            return self.conn.getresponse()

    def create(self):
        r = self.call("POST", "/v1/sandboxes", {})
        body = r.read()
        assert r.status == 201, (r.status, body)
        return json.loads(body)["id"]

    def destroy(self, sid):
        r = self.call("DELETE", f"/v1/sandboxes/{sid}")
        r.read()
        assert r.status == 204, r.status

    def exec(self, sid, argv, first=None):
        """Runs argv; returns (exit status, output). `first` is called at
        the first output frame."""
        body = {"argv": argv, "cwd": "", "env": [], "stdin": False, "output_dir": None}
        env = [("PATH", "/usr/bin:/bin")]
        import base64
        b64 = lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")
        body["env"] = [[b64(k), b64(v)] for k, v in env]
        r = self.call("POST", f"/v1/sandboxes/{sid}/exec", body)
        assert r.status == 200, (r.status, r.read())
        out, status = b"", None
        while True:
            head = r.read(5)
            if len(head) < 5:
                break
            tag, n = head[0:1], struct.unpack(">I", head[1:])[0]
            payload = r.read(n)
            if tag == b"o":
                if first and not out:
                    first()
                out += payload
            elif tag == b"x":
                status = json.loads(payload)
        r.read()
        return status, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cubby")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--latency", type=int, default=300)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--provider", default="linux")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cubby-host-bench-")
    token = os.urandom(16).hex()
    with open(f"{work}/token", "w") as f:
        f.write(token)
    os.mkdir(f"{work}/root")
    server = subprocess.Popen(
        [a.cubby, "serve", "--host", "--listen", "127.0.0.1:0", "--token-file", f"{work}/token",
         "--host-dir", f"{work}/sandboxes", "--host-max", str(a.idle + a.clients + 10),
         "--provider", a.provider, "--root", f"{work}/root"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    addr = None
    for line in server.stderr:
        m = re.match(r"cubby: listening on http://(.*)/mcp", line)
        if m:
            addr = m.group(1)
            break
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    try:
        c = Client(addr, token)
        # Warm: one sandbox with one command, then gone.
        sid = c.create(); c.exec(sid, ["true"]); c.destroy(sid)
        def total_pss():
            return pss_kib(server.pid) + sum(pss_kib(p) for p in descendants(server.pid))
        before = total_pss()
        ids = []
        t0 = time.perf_counter()
        for _ in range(a.idle):
            ids.append(c.create())
        made = time.perf_counter() - t0
        after = total_pss()
        procs_idle = len(descendants(server.pid))
        per = (after - before) / a.idle
        print(f"idle: {a.idle} sandboxes made in {made:.2f} s ({made / a.idle * 1000:.2f} ms each); "
              f"server+children PSS {before} -> {after} KiB = {per:.1f} KiB per sandbox; "
              f"processes under the server: {procs_idle}")
        lat, creates, warm = [], [], []
        for _ in range(a.latency):
            t = [None]
            start = time.perf_counter()
            sid = c.create()
            created = time.perf_counter()
            status, out = c.exec(sid, ["echo", "hi"], first=lambda: t.__setitem__(0, time.perf_counter()))
            assert status == {"exited": 0} and out == b"hi\n", (status, out)
            lat.append((t[0] - start) * 1000)
            creates.append((created - start) * 1000)
            # A second command in the same sandbox: its provider has started.
            start = time.perf_counter()
            status, out = c.exec(sid, ["echo", "hi"], first=lambda: t.__setitem__(0, time.perf_counter()))
            assert status == {"exited": 0} and out == b"hi\n", (status, out)
            warm.append((t[0] - start) * 1000)
            c.destroy(sid)
        def pct(xs):
            xs = sorted(xs)
            q = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]
            return f"p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {xs[-1]:.2f} ms"
        print(f"create -> first output ({a.latency} times, {a.idle} idle alive): {pct(lat)}")
        print(f"  of which create alone: {pct(creates)}")
        print(f"  a second command in the same sandbox, exec -> first output: {pct(warm)}")
        counts = [0] * a.clients
        stop = time.perf_counter() + a.seconds
        errors = []
        def client(i):
            try:
                cc = Client(addr, token)
                sid = cc.create()
                while time.perf_counter() < stop:
                    status, _ = cc.exec(sid, ["true"])
                    assert status == {"exited": 0}, status
                    counts[i] += 1
                cc.destroy(sid)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        t0 = time.perf_counter()
        for th in threads: th.start()
        for th in threads: th.join()
        took = time.perf_counter() - t0
        print(f"throughput: {sum(counts)} commands by {a.clients} concurrent clients in {took:.1f} s "
              f"= {sum(counts) / took:.0f} commands/s; errors: {len(errors)} {errors[:3]}")
        for sid in ids:
            c.destroy(sid)
        # A destroy answers once its commands are reaped: nothing is left
        # now (no wait; a process seen here is a failure).
        left = descendants(server.pid)
        print(f"after destroying every sandbox: {len(left)} processes under the server "
              f"({len([n for n in os.listdir(f'{work}/sandboxes') if n != '.stores'])} "
              "workspaces left)")
        if left or errors:
            sys.exit(1)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
