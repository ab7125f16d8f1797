"""A TCP relay on 127.0.0.1 that counts the client's turns: how many times the client sent
bytes after the server had sent some (the first client bytes count too).

A turn is one wait for the server: a client that sends MAIL, RCPT, DATA and the message each
after the previous reply makes 4 turns per one-recipient mail; a client that pipelines
(RFC 2920) the envelope and DATA makes 2. The count is exact, whatever the timing, as long as
each of the client's writes reaches the relay in one read (true for the few hundred bytes of a
command group on loopback). Works for any server behind it (aiosmtpd, Postfix's smtp-sink)
and through TLS (it never looks inside the bytes).

``TurnRelay(port).start()`` runs it in a thread; ``relay.port`` is where clients connect;
``relay.turns`` the total over every connection; ``relay.connections`` how many were opened.
With ``gate`` (a ``threading.Event``), an accepted connection waits until the gate is set
before the relay connects it to the server (a server that is slow to answer, e.g. while a
client's first command is in flight); ``relay.arrived`` is set at the first accepted
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class TurnRelay:
    """The relay (see the module docstring); thread-safe counters."""

    def __init__(
        self,
        target_port: int,
        target_host: str = "127.0.0.1",
        gate: threading.Event | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self.gate = gate
        self.arrived = threading.Event()
        self.port = 0
        self.turns = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> TurnRelay:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="turn-relay", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("turn relay did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> TurnRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.arrived.set()
        if self.gate is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.gate.wait)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        with self._lock:
            self.connections += 1
        last = ["server"]  # the server speaks first (greeting)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, side: str) -> None:
            try:
                while data := await src.read(1 << 16):
                    if side == "client" and last[0] == "server":
                        with self._lock:
                            self.turns += 1
                    last[0] = side
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError, RuntimeError):
                    dst.close()

        await asyncio.gather(pump(reader, up_writer, "client"), pump(up_reader, writer, "server"))
