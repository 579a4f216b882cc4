"""A TCP forwarder on 127.0.0.1 that can be cut and restored on the same port (a network outage).

    proxy = Proxy(("127.0.0.1", server_port)).start()    # clients use 127.0.0.1:proxy.port
    proxy.cut()              # every open connection is reset; new ones are black-holed
    proxy.cut(refuse=True)   # ... or refused
    proxy.restore()          # forwarding again, same port

Black-holed (the default: a partition or a dead route): the port accepts connections and then
nothing ever comes back, so clients wait for their timeouts. Refused: the server's host answers but
nothing listens, so each connection fails at once.
"""
from __future__ import annotations

import socket
import struct
import threading

CHUNK = 64 << 10


def _reset(s: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), waking a thread blocked in recv on it."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


class Proxy:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self.connections = 0          # accepted while forwarding
        self.dropped = 0              # reset by cut() or held while cut
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()   # both ends of every forwarded connection
        self._held: list[socket.socket] = []     # accepted while black-holed
        self._cut = False
        self._listener: socket.socket | None = None

    # ------------------------------------------------------------ control

    def start(self) -> "Proxy":
        self._listen()
        return self

    def cut(self, refuse: bool = False) -> None:
        with self._lock:
            self._cut = True
            doomed, self._open = list(self._open), set()
            listener = self._listener if refuse else None
            if listener is not None:
                self._listener = None
        self.dropped += len(doomed) // 2
        for s in doomed:
            _reset(s)
        if listener is not None:  # nothing listens: the kernel refuses every connection
            _reset(listener)

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            held, self._held = self._held, []
        for s in held:
            _reset(s)
        if self._listener is None:  # cut(refuse=True) closed it
            self._listen()

    def close(self) -> None:
        self.cut()
        with self._lock:
            listener, self._listener = self._listener, None
            held, self._held = self._held, []
        for s in held + ([listener] if listener else []):
            _reset(s)

    # ------------------------------------------------------------ forwarding

    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        self.port = s.getsockname()[1]
        with self._lock:
            self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed: cut(refuse=True) or close()
                return
            with self._lock:
                if self._cut:  # black-holed: held open, never read, never answered
                    self._held.append(client)
                    self.dropped += 1
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._cut:
                    _reset(client)
                    _reset(upstream)
                    continue
                self._open |= {client, upstream}
                self.connections += 1
            done = threading.Semaphore(0)  # released by each direction as it ends
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, done), daemon=True).start()
            threading.Thread(target=self._reap, args=(client, upstream, done), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)  # a half-close passes through
        except OSError:  # reset by cut() or by either end: the other direction ends too
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        done.release()

    def _reap(self, client: socket.socket, upstream: socket.socket, done: threading.Semaphore) -> None:
        done.acquire()
        done.acquire()
        with self._lock:
            mine = client in self._open  # else cut() has closed both
            self._open -= {client, upstream}
        if mine:
            client.close()
            upstream.close()
