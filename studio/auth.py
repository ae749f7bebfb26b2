"""Serving the studio: ``serve(demo, ...)`` launches it behind ``AuthGate``, the login check on every route.

Gradio's own ``auth`` checks the page, config, API-call, file, queue and upload routes, but not all of them (in
gradio 6.31 ``/openapi.json``, ``/gradio_api/cancel``, ``/gradio_api/stream/...``, ``/gradio_api/heartbeat/...``,
``/gradio_api/run-history/...`` and others answer without a login). ``AuthGate`` is an ASGI middleware in front of
the whole app: with auth on, a request without a valid login cookie gets 401 unless its path is in ``PUBLIC``, the
routes the login page itself needs (each listed with the reason). A route gradio adds later is therefore closed
until someone lists it here. With auth off the gate lets everything through.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection

# Exact paths (and prefixes ending in "/") reachable without a login, and why each must be.
PUBLIC: dict[str, str] = {
    "/": "the login page: without a login gradio serves only the login form's config, no app content",
    "/login": "posting the login form",
    "/login/": "posting the login form",
    "/logout": "ending a session needs no session",
    "/gradio_api/startup-events": "gradio's launch() calls it itself, without a cookie; it only runs startup "
                                  "events once and answers true/false",
    "/favicon.ico": "static asset of the login page",
    "/manifest.json": "static PWA manifest (app title and icon only)",
    "/pwa_icon": "static icon of the login page",
    "/pwa_icon/": "static icon of the login page (sizes)",
    "/robots.txt": "static",
    "/theme.css": "the login page's theme",
    "/gradio_api/theme.css": "the login page's theme",
    "/static/": "the bundled frontend (JS/CSS/fonts) that renders the login page",
    "/assets/": "the bundled frontend (JS/CSS) that renders the login page",
    "/svelte/": "the bundled frontend (Svelte runtime) that renders the login page",
}


def is_public(path: str) -> bool:
    return path in PUBLIC or any(p.endswith("/") and p != "/" and path.startswith(p) for p in PUBLIC)


class AuthGate:
    """ASGI middleware: 401 for any non-public request without a valid gradio login (see the module docstring)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        server = scope["app"]  # the gradio App (Starlette sets it before the middleware stack runs)
        path = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        if getattr(server, "auth", None) is None or is_public(path) or self._user(server, scope):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"detail": {"error": "Not authenticated"}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _user(server: Any, scope: dict) -> str | None:
        # The same cookies gradio's /login sets and its own login check reads.
        cookies = HTTPConnection(scope).cookies
        token = cookies.get(f"access-token-{server.cookie_id}") or cookies.get(
            f"access-token-unsecure-{server.cookie_id}")
        return server.tokens.get(token) if token else None


def serve(demo: gr.Blocks, *, host: str = "127.0.0.1", port: int | None = None,
          auth: list[tuple[str, str]] | None = None, head: str | None = None, prevent_thread_lock: bool = False,
          quiet: bool = False) -> None:
    """``demo.launch`` with ``AuthGate`` in front of every route (the one way the studio is served)."""
    demo.launch(server_name=host, server_port=port, auth=auth or None, head=head,
                prevent_thread_lock=prevent_thread_lock, quiet=quiet,
                app_kwargs={"middleware": [Middleware(AuthGate)]})
