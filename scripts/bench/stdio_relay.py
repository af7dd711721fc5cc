#!/usr/bin/env python3
"""A bare stdio relay: starts the command given and copies bytes between
this process's stdin/stdout and the command's, one `select` loop, no
parsing. The upstream benchmark's anchor for the hop itself: a call
through it costs the same server one more process on the way each way
(scripts/bench/upstream_client.py --relay).

Usage: stdio_relay.py COMMAND [ARGS...]
"""

import os
import select
import subprocess
import sys


def main():
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    inp, out = sys.stdin.fileno(), sys.stdout.fileno()
    to_child, from_child = child.stdin.fileno(), child.stdout.fileno()
    routes = {inp: to_child, from_child: out}
    while routes:
        ready, _, _ = select.select(list(routes), [], [])
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                if fd == inp:
                    child.stdin.close()
                del routes[fd]
                continue
            view = memoryview(data)
            while view:
                view = view[os.write(routes[fd], view):]
    child.wait()


if __name__ == "__main__":
    main()
