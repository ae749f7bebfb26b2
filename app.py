"""Launch MOAT Studio: ``python app.py [--db FILE] [--config FILE] [--host H] [--port P] [--auth U:P|FILE]
[--viewers U:P|FILE] [--read-only] [--workspace DIR] [--[no-]first-visit-demo]``.

Thin by design: parse flags (env: MOAT_DB, MOAT_CONFIG, GRADIO_SERVER_NAME, GRADIO_SERVER_PORT, MOAT_AUTH,
MOAT_VIEWERS, MOAT_READ_ONLY, MOAT_WORKSPACE, MOAT_FIRST_VISIT_DEMO), open the one DuckDB store this process owns,
build the studio (``studio.app.build_app``) and serve it behind the login gate (``studio.auth.serve``). Nothing is
trained at start-up. Spaces mode (env ``SPACE_ID`` set) caps run sizes and allows only the demo agents. Flags are
parsed in ``main`` only, never at import (Spaces imports this file).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path


def parse_auth(value: str | None) -> list[tuple[str, str]] | None:
    """``user:password``, or a file of ``user:password`` lines (blank lines and ``#`` comments skipped). An inline
    value that looks like a list (``ana:pw1,bob:pw2``) is refused: it was taken as user ana with password
    ``pw1,bob:pw2``, and neither ana/pw1 nor bob/pw2 could log in, with no word at start-up."""
    if not value:
        return None
    if not Path(value).is_file() and re.search(r",[^,:]+:", value):
        raise SystemExit(f"--auth: one user:password inline, got what looks like a list ({value.split(':')[0]}:...,"
                         "...); for several users, give a file of user:password lines")
    lines = Path(value).read_text(encoding="utf-8").splitlines() if Path(value).is_file() else [value]
    pairs = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise SystemExit(f"--auth: expected user:password, got {line[:40]!r}")
        pairs.append((user, password))
    return pairs or None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description="MOAT Studio: run, watch, curate and steer the MOAT loop.",
                                allow_abbrev=False)
    p.add_argument("--db", default=env.get("MOAT_DB", "runs/studio.duckdb"), help="DuckDB store (env MOAT_DB)")
    p.add_argument("--config", default=env.get("MOAT_CONFIG", "examples/demo.toml"), help="config shown in Run tab")
    p.add_argument("--host", default=env.get("GRADIO_SERVER_NAME", "127.0.0.1"), help="interface to listen on")
    p.add_argument("--port", type=int, default=int(env.get("GRADIO_SERVER_PORT", "7860")), help="port")
    p.add_argument("--auth", default=env.get("MOAT_AUTH"), help="user:password, or a file of user:password lines")
    p.add_argument("--viewers", default=env.get("MOAT_VIEWERS"),
                   help="read-only accounts: user:password, or a file of user:password lines (env MOAT_VIEWERS)")
    p.add_argument("--read-only", action="store_true", default=env.get("MOAT_READ_ONLY", "") in ("1", "true"),
                   help="viewers only: no overrides, no jobs, no exports")
    p.add_argument("--workspace", default=env.get("MOAT_WORKSPACE", "."),
                   help="paths sent from the page (config paths) must lie inside this directory (env MOAT_WORKSPACE)")
    p.add_argument("--first-visit-demo", action=argparse.BooleanOptionalAction,
                   default=env.get("MOAT_FIRST_VISIT_DEMO", "1" if env.get("SPACE_ID") else "") in ("1", "true"),
                   help="on an empty store, create and start a one-iteration demo run at once, so a first visit has "
                        "something to browse (default: on Spaces only; env MOAT_FIRST_VISIT_DEMO)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spaces = bool(os.environ.get("SPACE_ID"))
    if spaces and args.host == "127.0.0.1":
        args.host = "0.0.0.0"  # Spaces routes to the container's port
    # No usage analytics calls home from a curation studio unless the operator asks for them.
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from engine.store import Store, StoreError
    from engine.threads import ensure_thread_policy, usable_cores
    from studio.app import HEAD, build_app
    from studio.auth import serve

    # The studio's job computes in this process beside the web server: with 4+ cores, leave one to the server.
    policy = ensure_thread_policy(reserve=1 if usable_cores()[0] >= 4 else 0)
    print(f"MOAT Studio: {policy.describe()}", file=sys.stderr)

    try:
        store = Store(args.db, read_only=args.read_only)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    viewers = parse_auth(args.viewers) or []
    accounts = (parse_auth(args.auth) or []) + viewers
    demo = build_app(store, args.config, read_only=args.read_only, spaces=spaces,
                     viewers=frozenset(user for user, _ in viewers), workspace=args.workspace,
                     first_visit=args.first_visit_demo)
    try:
        serve(demo, host=args.host, port=args.port, auth=accounts or None, head=HEAD)
    finally:
        demo.moat_jobs.stop()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
