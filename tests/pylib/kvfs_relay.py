"""A TCP relay between a kvfs node and etcd that can lose or hold back what passes.

Python 3 standard library only. Every connection the node opens to the relay is relayed to the
target as is, but:
  - inside `swallowing()`, whatever the target answers is dropped: etcd applies a request while
    the node hears nothing and gives up when its request times out, the one failure a freeze of
    etcd makes only by chance (a frozen etcd may or may not apply, once resumed, the requests
    the node gave up on). Leaving it closes every connection that lost bytes, so the node
    reconnects cleanly (a stream with a hole would not parse);
  - inside `holding()`, what the node sends waits in the relay and goes on, in order, when the
    block ends, while etcd's answers and watch events still reach the node: the node's change
    is on its way while other nodes' commits arrive.

    with TcpRelay(("127.0.0.1", etcd_port)) as relay:
        ... start the node with --etcd relay.endpoint ...
        with relay.swallowing():
            os.rename(...)   # applied by etcd, EROFS here
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1"):
        self.target = target
        self._listener = socket.create_server((host, 0))
        self.endpoint = f"http://{host}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._swallow = False
        self._hold = False
        self._held: dict[int, list[bytes]] = {}  # by the client socket's fileno, in order
        self._pairs: list[tuple[socket.socket, socket.socket, list]] = []  # client, target, lost
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> "TcpRelay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs, self._pairs = self._pairs, []
        self._listener.close()
        for client, upstream, _ in pairs:
            self._close_pair(client, upstream)

    @contextlib.contextmanager
    def swallowing(self):
        """Drops the target's answers until the block ends, then closes the connections that
        lost some."""
        with self._lock:
            self._swallow = True
        try:
            yield
        finally:
            with self._lock:
                self._swallow = False
                lost = [p for p in self._pairs if p[2]]
                self._pairs = [p for p in self._pairs if not p[2]]
            for client, upstream, _ in lost:
                self._close_pair(client, upstream)

    @contextlib.contextmanager
    def holding(self):
        """Holds back what the node sends until the block ends, then sends it on in order."""
        with self._lock:
            self._hold = True
        try:
            yield
        finally:
            with self._lock:
                self._hold = False
                held, self._held = self._held, {}
                targets = {p[0].fileno(): p[1] for p in self._pairs}
                for fileno, chunks in held.items():
                    with contextlib.suppress(OSError):
                        if fileno in targets:
                            targets[fileno].sendall(b"".join(chunks))

    @staticmethod
    def _close_pair(client: socket.socket, upstream: socket.socket) -> None:
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = (client, upstream, [])
            with self._lock:
                if self._closed:
                    self._close_pair(client, upstream)
                    return
                self._pairs.append(pair)
            lost = pair[2]

            def request(data: bytes, client=client, upstream=upstream) -> None:
                with self._lock:  # held bytes go on under it (holding()), before newer ones
                    if self._hold:
                        self._held.setdefault(client.fileno(), []).append(data)
                    else:
                        upstream.sendall(data)

            def answer(data: bytes, client=client, lost=lost) -> None:
                with self._lock:
                    drop = self._swallow
                if drop:
                    lost.append(len(data))
                else:
                    client.sendall(data)
            threading.Thread(target=self._copy, args=(client, upstream, request),
                             daemon=True).start()
            threading.Thread(target=self._copy, args=(upstream, client, answer),
                             daemon=True).start()

    def _copy(self, src: socket.socket, dst: socket.socket, send) -> None:
        """Hands every read of src to `send` until src ends, then ends dst."""
        try:
            while data := src.recv(65536):
                send(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
