"""``python -m engine status``: what a workspace DuckDB holds — runs, iterations, stage states and row counts.

Contract: ``status [--db D] [--json]`` (``--db`` defaults to ``runs/studio.duckdb``, as in every command) opens the
store read-only and prints ``Store.status_summary()`` as one JSON object (``--json``) or as a short human listing (a
stage a killed process left ``running`` reads ``interrupted``; an evaluated iteration's accuracy per split with its
Wilson interval; each experiment with its report command); exits 0. A missing file prints ``error: ...`` on stderr and
exits 2; a file held by another process (the studio or a running job), of a newer schema or not a store exits 3.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from engine.commands._common import BAD_INPUT, DEFAULT_DB, print_json, store_missing, store_unusable

HELP = ("Show the runs, iterations, stage states, row counts, evaluated accuracies and experiments in a "
        "workspace DuckDB file.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB store (default: {DEFAULT_DB})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.store import StoreError, status_summary

    if store_missing(args.db):
        return BAD_INPUT
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
        lines.append(f"run {run['run_id']} ({run['name']}, {run['tasks']} tasks) dir={run['directory']}")
        for it in run["iterations"]:
            stages = ", ".join(f"{name}={s['status']}" for name, s in it["stages"].items()) or "no stages"
            rows = ", ".join(f"{t}={n}" for t, n in it["rows"].items() if n) or "no rows"
            lines.append(f"  iteration {it['iteration']}: {stages}; rows: {rows}")
            if evaluated := _evaluation(it.get("evaluation") or {}):
                lines.append(f"    evaluation: {evaluated}")
    for exp in summary.get("experiments", []):
        lines.append(f"experiment {exp['experiment_id']} ({exp['name']}, {exp['runs']} run(s)): python -m engine "
                     f"report --db {shlex.quote(summary['db'])} --experiment {exp['experiment_id']} --markdown")
    return "\n".join(lines)


def _evaluation(per_split: dict[str, dict[str, Any]]) -> str:
    """``held-in 60.4% [53.9, 66.6] of 225, gap PPL 1.199 · held-out ...``: accuracy with its Wilson interval."""
    parts = []
    for split, m in per_split.items():
        if m.get("accuracy") is None:
            continue
        lo, hi = m.get("ci95") or [None, None]
        interval = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else ""
        of = f" of {m['n']}" if m.get("n") else ""
        gap = f", gap PPL {m['gap_ppl']:.3f}" if m.get("gap_ppl") is not None else ""
        parts.append(f"{split.replace('_', '-')} {100 * m['accuracy']:.1f}%{interval}{of}{gap}")
    return " · ".join(parts)
