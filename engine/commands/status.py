"""``python -m engine status``: what a workspace DuckDB holds — runs, iterations, stage states and row counts.

Contract: ``status --db D [--json]`` opens the store read-only and prints ``Store.status_summary()`` as one JSON
object (``--json``) or as a short human listing (a stage a killed process left ``running`` reads ``interrupted``);
exits 0. A missing file prints ``error: ...`` on stderr and exits 2; a file held by another process (the studio or a
running job), of a newer schema or not a store exits 3.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.commands._common import print_json, store_unusable

HELP = "Show the runs, iterations, stage states and row counts in a workspace DuckDB file."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="the workspace DuckDB file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.store import StoreError, status_summary

    if not Path(args.db).exists():  # bad input (2), as in every command; opening it would create an empty store
        print(f"error: no store at {args.db} (use --db to pick one)", file=sys.stderr)
        return 2
    try:
        summary = status_summary(args.db)
    except StoreError as exc:
        return store_unusable(exc)
    if args.json:
        print_json(summary)
    else:
        print(_human(summary))
    return 0


def _human(summary: dict[str, Any]) -> str:
    lines = [f"{summary['db']} (schema v{summary['schema_version']}): {len(summary['runs'])} run(s)"]
    for run in summary["runs"].values():
        lines.append(f"run {run['run_id']} ({run['name']}, {run['tasks']} tasks) dir={run['run_dir']}")
        for it in run["iterations"]:
            stages = ", ".join(f"{name}={s['status']}" for name, s in it["stages"].items()) or "no stages"
            rows = ", ".join(f"{t}={n}" for t, n in it["rows"].items() if n) or "no rows"
            lines.append(f"  iteration {it['iteration']}: {stages}; rows: {rows}")
    return "\n".join(lines)
