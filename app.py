"""Launch MOAT Studio: ``python app.py [--db FILE] [--config FILE] [--host H] [--port P] [--auth U:P|FILE]
[--viewers U:P|FILE] [--read-only] [--workspace DIR] [--[no-]first-visit-demo]``.

Thin by design: parse flags (env: MOAT_DB, MOAT_CONFIG, GRADIO_SERVER_NAME, GRADIO_SERVER_PORT, MOAT_AUTH,
MOAT_VIEWERS, MOAT_READ_ONLY, MOAT_WORKSPACE, MOAT_FIRST_VISIT_DEMO), open the one DuckDB store this process owns,
build the studio (``studio.app.build_app``) and serve it behind the login gate (``studio.auth.serve``). Nothing is
trained at start-up. Spaces mode (env ``SPACE_ID`` set) caps run sizes and allows only the demo agents. Flags are
parsed in ``main`` only, never at import (Spaces imports this file).

A bad flag or environment value (a ``--config`` file that is not there, an ``--auth`` that is neither user:password
nor a file) stops start-up before anything is opened or built, as the CLI reports bad input: ``error: WHERE: ...`` on
stderr, exit 2, WHERE naming the flag or the environment variable it came from. The store's own refusals exit 3.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path


class FlagError(SystemExit):
    """A bad flag or environment value; ``main`` prints it as ``error: MESSAGE`` and exits 2."""


def parse_auth(value: str | None, where: str = "--auth") -> list[tuple[str, str]] | None:
    """``user:password``, or a file of ``user:password`` lines (blank lines and ``#`` comments skipped). An inline
    value that looks like a list (``ana:pw1,bob:pw2``) is refused: it was taken as user ana with password
    ``pw1,bob:pw2``, and neither ana/pw1 nor bob/pw2 could log in, with no word at start-up. ``where``: the flag or
    environment variable the value came from, which every ``FlagError`` names."""
    if not value:
        return None
    is_file = Path(value).is_file()
    if not is_file and re.search(r",[^,:]+:", value):
        raise FlagError(f"{where}: one user:password inline, got what looks like a list ({value.split(':')[0]}:...,"
                        "...); for several users, give a file of user:password lines")
    if not is_file and ":" not in value:  # a mistyped file name, most likely: say that no such file was found
        # An environment variable is where a deployment keeps its secret (a Space's MOAT_AUTH): not echoed, since a
        # password given without its user would land in the logs; a flag was typed here, so it helps to see it.
        got = f"{value[:40]!r}" if where.startswith("--") else "a value with no ':'"
        raise FlagError(f"{where}: expected user:password or a file of such lines, got {got} (no such file)")
    lines = Path(value).read_text(encoding="utf-8").splitlines() if is_file else [value]
    pairs = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            # Never echo the line: it may hold a password, and this message goes to logs.
            what = ("no ':' between user and password" if not sep else
                    "an empty user name" if not user else f"an empty password for user {user!r}")
            at = f"{value}:{number}: " if is_file else ""
            raise FlagError(f"{where}: {at}expected user:password, got {what} (the line is not shown: it may hold "
                            "a password)")
        pairs.append((user, password))
    return pairs or None


def given_as(argv: list[str], flag: str, env_name: str) -> str:
    """Where a flag's value came from, for an error to name: the flag when given, else its environment variable."""
    return flag if any(a == flag or a.startswith(f"{flag}=") for a in argv) else env_name


def check_config(path: str, where: str) -> None:
    """The Run tab's config must be a file: a typo in ``--config`` or ``MOAT_CONFIG`` once started the studio with an
    empty editor and no word why. ``where`` empty: the default, which is relative to the working directory."""
    default = "" if where else " (the default, a path from the repository's root: start there or give --config FILE)"
    if not Path(path).is_file():
        raise FlagError(f"{where or '--config'}: {'not a file' if Path(path).exists() else 'no such file'}: "
                        f"{path}{default}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description="MOAT Studio: run, watch, curate and steer the MOAT loop.",
                                allow_abbrev=False)
    p.add_argument("--db", default=env.get("MOAT_DB", "runs/studio.duckdb"), help="DuckDB store (env MOAT_DB)")
    p.add_argument("--config", default=env.get("MOAT_CONFIG") or "examples/demo.toml",
                   help="config shown in the Run tab (env MOAT_CONFIG)")
    p.add_argument("--host", default=env.get("GRADIO_SERVER_NAME", "127.0.0.1"), help="interface to listen on")
    # A string default goes through type=int as a typed --port would: a bad env value is a usage error (exit 2).
    p.add_argument("--port", type=int, default=env.get("GRADIO_SERVER_PORT", "7860"),
                   help="port (env GRADIO_SERVER_PORT)")
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
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:  # every flag checked before the store is opened (or created) and the studio built
        check_config(args.config, given_as(argv, "--config", "MOAT_CONFIG" if os.environ.get("MOAT_CONFIG") else ""))
        viewers = parse_auth(args.viewers, given_as(argv, "--viewers", "MOAT_VIEWERS")) or []
        accounts = (parse_auth(args.auth, given_as(argv, "--auth", "MOAT_AUTH")) or []) + viewers
    except FlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
