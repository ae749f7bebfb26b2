"""A local OpenAI-compatible HTTP server for the critic tests, shared by test_critic_openai.py (scripted replies per
prompt marker) and test_critic_soak.py (injected faults), which differ only in how their handler answers:

* ``JSONHandler``: the base request handler (HTTP/1.1, no request log, ``_send`` for a JSON reply that tolerates a
  client that already left);
* ``local_server``: a ``ThreadingHTTPServer`` for such a handler on a free port of 127.0.0.1, with the test's state
  object as ``server.state`` for the handler to read and record into.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

State = TypeVar("State")


class JSONHandler(BaseHTTPRequestHandler):
    """Answers with ``_send``; a subclass implements ``do_POST`` and reads its state from ``self.server.state``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """Reply ``status`` with ``payload`` (Content-Type application/json unless ``headers`` names one)."""
        headers = dict(headers or {})
        try:
            self.send_response(status)
            self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client timed out and left
            pass


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: with the critic's 8 concurrent connections on a loaded machine, a
    # connection past the backlog has its SYN dropped and retried a second later, past the client's 0.5 s timeout in
    # the soak test, so the client counts an attempt the server never saw. A real server listens with a deep backlog.
    request_queue_size = 128


@contextmanager
def local_server(handler: type[JSONHandler], state: State) -> Iterator[tuple[State, str]]:
    """``(state, base_url)`` while ``handler`` serves on a free port of 127.0.0.1 (daemon threads, polled every
    50 ms); ``base_url`` ends in ``/v1``. Shut down and closed on leaving."""
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
