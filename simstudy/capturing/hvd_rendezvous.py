"""Horovod's Gloo rendezvous for a captured job: `python -m simstudy.capturing.hvd_rendezvous N PORT`
serves Horovod's own HTTP rendezvous (`RendezvousHTTPServer` with `RendezvousHandler`, what
`horovodrun --gloo` starts) for N ranks, one per host (host0, host1, ...), on PORT; it prints
"ready" once it listens and serves until its stdin closes.
"""

from __future__ import annotations

import sys
import threading


def main(argv: list[str]) -> int:
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    n, port = int(argv[0]), int(argv[1])
    plan = get_host_assignments(parse_hosts(",".join(f"host{r}:1" for r in range(n))), n)
    server = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
    server.init(plan)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print("ready", flush=True)
    sys.stdin.read()  # until the capture closes our stdin (or kills us)
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
