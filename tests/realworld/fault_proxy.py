"""A fault-injecting TCP proxy on loopback, standing in for `tc netem` (its qdisc is not in this kernel): it delays
every chunk it forwards, cuts connections after a random number of bytes, and can freeze (hold every byte while
keeping the sockets open, as a stalled network does). Every thread stops within about 0.1 s of :meth:`close`."""

from __future__ import annotations

import random
import socket
import threading
import time


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream`` (``host:port``) with faults.

    A cut stops forwarding at once and closes both sockets 50 ms later: bytes forwarded before it are read by the
    peers (as when a cable is pulled), instead of being discarded by a TCP reset.

    Args:
        upstream: where to forward.
        delay_s: each forwarded chunk waits a uniform random time in ``[0, delay_s]``.
        cut_after: a connection is cut after a uniform random number of bytes in this range (both ways together);
            None: never.
        seed: of the random faults.
    """

    def __init__(
        self, upstream: str, delay_s: float = 0.0, cut_after: tuple[int, int] | None = None, seed: int = 0
    ) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.delay_s, self.cut_after = delay_s, cut_after
        self.cuts = self.connections = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._frozen = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def freeze(self, frozen: bool = True) -> None:
        """Hold (or release) every byte in both directions; connections stay open."""
        if frozen:
            self._frozen.set()
        else:
            self._frozen.clear()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._stop.set()
        for thread in list(self._threads):
            thread.join(2.0)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=1.0)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                budget = self._rng.randint(*self.cut_after) if self.cut_after else None
            link = _Link(self, client, server, budget)
            for a, b in ((client, server), (server, client)):
                thread = threading.Thread(target=link.pump, args=(a, b), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _delay(self) -> float:
        with self._lock:
            return self._rng.uniform(0, self.delay_s) if self.delay_s else 0.0


class _Link:
    """One proxied connection: two pumps share its byte budget; either one cuts both sockets."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket, budget: int | None) -> None:
        self.proxy, self.sockets, self.budget = proxy, (client, server), budget
        self.closed = threading.Event()
        for s in self.sockets:
            s.settimeout(0.1)

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed.is_set() and not self.proxy._stop.is_set():
                if self.proxy._frozen.is_set():
                    time.sleep(0.01)
                    continue
                try:
                    data = src.recv(16384)
                except TimeoutError:
                    continue
                if not data:
                    return
                if self._spend(len(data)):
                    time.sleep(0.05)  # let the peers read what was forwarded: a cut cable, not a reset with data unread
                    return
                time.sleep(self.proxy._delay())
                dst.sendall(data)
        except OSError:
            return
        finally:
            self.close()

    def _spend(self, n: int) -> bool:
        """Count ``n`` bytes against the budget; True (and a cut) when it is exhausted."""
        with self.proxy._lock:
            if self.budget is None:
                return False
            if self.budget <= 0:  # the other direction already cut it
                return True
            self.budget -= n
            if self.budget > 0:
                return False
            self.proxy.cuts += 1
            return True

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
