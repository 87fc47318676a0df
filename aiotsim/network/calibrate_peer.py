"""Calibration peer: real TCP transfers over 127.0.0.1, run inside the calibration's namespace.

One invocation measures one case: ``--flows`` parallel connections each carry ``--size`` bytes from
a client thread to a server thread of this same process. All connections are opened first; then a
barrier releases every sender at once and the clock starts (``time.monotonic``, s). A flow's
completion time is when its server thread has received its last byte. Prints one JSON object:
``{"ends_s": [...], "bytes": size, "flows": k}`` with the completion times sorted.

Run by :func:`aiotsim.network.calibrate.run_calibration` through ``ip netns exec``; it only ever
talks to 127.0.0.1 (the namespace's own loopback). Standard library only, so it starts fast.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

SETTLE_S = 0.05  # s, pause after the handshakes so their packets have left the shaper


def measure(size: int, flows: int, timeout_s: float) -> list[float]:
    """Run ``flows`` concurrent transfers of ``size`` bytes; return completion times in s."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(flows)
    server.settimeout(timeout_s)
    port = server.getsockname()[1]
    ends: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def receive(conn: socket.socket) -> None:
        try:
            conn.settimeout(timeout_s)
            got = 0
            while got < size:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"peer closed after {got} of {size} bytes")
                got += len(chunk)
            stamp = time.monotonic()
            with lock:
                ends.append(stamp)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            conn.close()

    receivers: list[threading.Thread] = []

    def accept_all() -> None:
        try:
            for _ in range(flows):
                conn, _addr = server.accept()
                thread = threading.Thread(target=receive, args=(conn,))
                thread.start()
                receivers.append(thread)
        except BaseException as exc:
            errors.append(exc)

    acceptor = threading.Thread(target=accept_all)
    acceptor.start()
    clients = [socket.create_connection(("127.0.0.1", port), timeout=timeout_s) for _ in range(flows)]
    acceptor.join()
    time.sleep(SETTLE_S)
    barrier = threading.Barrier(flows + 1)
    payload = b"\x5a" * size

    def send(sock: socket.socket) -> None:
        try:
            barrier.wait()
            sock.sendall(payload)
        except BaseException as exc:
            errors.append(exc)

    senders = [threading.Thread(target=send, args=(c,)) for c in clients]
    for thread in senders:
        thread.start()
    barrier.wait()
    start = time.monotonic()
    for thread in senders + receivers:
        thread.join()
    for sock in clients:
        sock.close()
    server.close()
    if errors:
        raise RuntimeError(f"transfer failed: {errors[0]!r}")
    return sorted(end - start for end in ends)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one calibration case over 127.0.0.1")
    parser.add_argument("--size", type=int, required=True, help="bytes per flow")
    parser.add_argument("--flows", type=int, required=True, help="concurrent connections")
    parser.add_argument("--timeout", type=float, default=120.0, help="socket timeout, s")
    args = parser.parse_args(argv)
    ends = measure(args.size, args.flows, args.timeout)
    print(json.dumps({"ends_s": ends, "bytes": args.size, "flows": args.flows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
