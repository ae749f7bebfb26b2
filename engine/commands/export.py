"""``python -m engine export``: write curated DPO pairs or grounder SFT records of one iteration to a file.

Contract: ``export --db D --run R --iteration T --what pairs|sft|rollouts --format jsonl|parquet --out FILE [--json]``
writes the rows of ``engine.export.export_pairs`` / ``export_sft`` (overrides applied) / ``export_rollouts`` (a GRPO
iteration's rollouts) atomically and prints
``{"what", "format", "path", "rows"}`` (``--json``) or a one-line summary; exits 0. An unknown run, a missing or
locked DuckDB file prints ``error: ...`` on stderr and exits 2. ``--out`` may be any path: the caller owns the shell
and its files, so the CLI is not confined to a workspace (the studio, which takes requests from browsers, is; see
``engine.workspace``).
"""

from __future__ import annotations

import argparse
import sys

from engine.commands._common import print_json, writable_file

HELP = "Export an iteration's curated DPO pairs, grounder SFT records or GRPO rollouts as JSONL or Parquet."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="the workspace DuckDB file")
    parser.add_argument("--run", required=True, help="run id (see `python -m engine status`)")
    parser.add_argument("--iteration", required=True, type=int, help="iteration whose data to export")
    parser.add_argument("--what", required=True, choices=("pairs", "sft", "rollouts"),
                        help="DPO pairs, grounder SFT records, or the rollouts of a GRPO iteration")
    parser.add_argument("--format", default=None, choices=("jsonl", "parquet"),
                        help="output format (default: parquet for a .parquet --out, else jsonl)")
    parser.add_argument("--out", required=True, metavar="FILE", type=writable_file,
                        help="output file (written atomically)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.export import export_pairs, export_rollouts, export_sft
    from engine.store import Store, StoreError

    # From the file's name when not given: "--out pairs.parquet" wrote JSONL into a .parquet file.
    args.format = args.format or ("parquet" if args.out.lower().endswith(".parquet") else "jsonl")
    try:
        with Store(args.db, read_only=True) as store:
            if store.get_run(args.run) is None:
                print(f"error: no run {args.run!r} in {args.db}", file=sys.stderr)
                return 2
            if args.iteration not in store.iterations(args.run):  # it wrote an empty file and said "wrote 0"
                print(f"error: run {args.run!r} has no iteration {args.iteration} (its iterations: "
                      f"{', '.join(map(str, store.iterations(args.run))) or 'none yet'})", file=sys.stderr)
                return 2
            export = {"pairs": export_pairs, "sft": export_sft, "rollouts": export_rollouts}[args.what]
            rows = export(store, args.run, args.iteration, args.out, args.format)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {"what": args.what, "format": args.format, "path": args.out, "rows": rows}
    if args.json:
        print_json(result)
    else:
        print(f"wrote {rows} {args.what} rows to {args.out} ({args.format})")
    return 0
