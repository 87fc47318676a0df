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


class _Receivers:
    """The server side of one case: accepts ``flows`` connections and timestamps (monotonic, s)
    the arrival of each one's last byte; errors are collected for the main thread."""

    def __init__(self, size: int, flows: int, timeout_s: float) -> None:
        self.size, self.flows, self.timeout_s = size, flows, timeout_s
        self.ends: list[float] = []
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(flows)
        self.server.settimeout(timeout_s)
        self.port = self.server.getsockname()[1]
        self.acceptor = threading.Thread(target=self._accept_all)

    def _receive(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.timeout_s)
            got = 0
            while got < self.size:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"peer closed after {got} of {self.size} bytes")
                got += len(chunk)
            stamp = time.monotonic()
            with self.lock:
                self.ends.append(stamp)
        except BaseException as exc:  # reported by the main thread
            self.errors.append(exc)
        finally:
            conn.close()

    def _accept_all(self) -> None:
        try:
            for _ in range(self.flows):
                conn, _addr = self.server.accept()
                thread = threading.Thread(target=self._receive, args=(conn,))
                thread.start()
                self.threads.append(thread)
        except BaseException as exc:
            self.errors.append(exc)


def _start_senders(
    clients: list[socket.socket], size: int, errors: list[BaseException]
) -> tuple[threading.Barrier, list[threading.Thread]]:
    """Start one sender per client; they all wait on the returned barrier, whose last party is the
    caller."""
    barrier = threading.Barrier(len(clients) + 1)
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
    return barrier, senders


def measure(size: int, flows: int, timeout_s: float) -> list[float]:
    """Run ``flows`` concurrent transfers of ``size`` bytes; return completion times in s."""
    rx = _Receivers(size, flows, timeout_s)
    rx.acceptor.start()
    clients = [socket.create_connection(("127.0.0.1", rx.port), timeout=timeout_s) for _ in range(flows)]
    rx.acceptor.join()
    time.sleep(SETTLE_S)
    barrier, senders = _start_senders(clients, size, rx.errors)
    barrier.wait()
    start = time.monotonic()
    for thread in [*senders, *rx.threads]:
        thread.join()
    for sock in clients:
        sock.close()
    rx.server.close()
    if rx.errors:
        raise RuntimeError(f"transfer failed: {rx.errors[0]!r}")
    return sorted(end - start for end in rx.ends)


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
