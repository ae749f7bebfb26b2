"""``python -m engine report --experiment ID``: an experiment's results over seeds, as JSON or markdown tables.

Contract: opens the store read-only and prints ``engine.report.experiment_report`` as one JSON object (``--json``)
or as markdown tables (``--markdown``, the default); exits 0. ``--by-template`` prints
``engine.breakdown.template_breakdown`` of ``--split`` instead (accuracy, sound plans and gold log-PPL per
template); ``--split`` without ``--by-template`` exits 2 (the other reports cover every evaluated split).
``--against ID[:VARIANT]`` prints ``engine.report_compare.compare_report`` instead (every variant paired with one
variant of another experiment in the store; two experiments evaluating different tasks exit 2 naming the fields).
An unknown experiment id exits 2 with ``error: ...`` on stderr listing the experiments the store knows; a missing
store exits 2 too; a store that cannot be used (held by another process, a newer schema, not a store) exits 3.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

HELP = "Report an experiment over seeds: means with t intervals, paired tests, wall times (--json | --markdown)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiment", required=True, help="experiment id (printed by `python -m engine experiment`)")
    parser.add_argument("--db", default="runs/studio.duckdb", help="DuckDB store (default: runs/studio.duckdb)")
    parser.add_argument("--by-template", action="store_true",
                        help="one split's accuracy, sound-plan share and gold-action log-PPL per task template "
                             "(the task's meta template, else its source), first vs last iteration")
    parser.add_argument("--split", default=None, choices=("held_in", "held_out", "dev"),
                        help="with --by-template only: the split to break down (default: held_out); the other "
                             "reports show every evaluated split")
    parser.add_argument("--against", default="", metavar="ID[:VARIANT]",
                        help="pair every variant with a variant of another experiment in the same store (its "
                             "baseline unless :VARIANT is given), over the seeds both ran: a tuning experiment "
                             "read against a baseline measured once. Refused when the two evaluate different tasks")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print one JSON object")
    form.add_argument("--markdown", action="store_true", help="print markdown tables (the default)")


def run(args: argparse.Namespace) -> int:
    from engine.breakdown import breakdown_markdown, template_breakdown
    from engine.commands._common import BAD_INPUT, print_json, store_missing, store_unusable
    from engine.report import UnknownExperiment, experiment_report
    from engine.report_compare import IncomparableExperiments, compare_markdown, compare_report
    from engine.report_markdown import report_markdown
    from engine.store import Store, StoreError

    if args.against and args.by_template:
        print("error: --against and --by-template are separate reports: give one", file=sys.stderr)
        return 2
    if args.split and not args.by_template:  # it used to be ignored silently
        print(f"error: --split {args.split} needs --by-template (the per-template breakdown of one split); the "
              "experiment report and --against already show every evaluated split", file=sys.stderr)
        return 2
    if store_missing(args.db):  # bad input (2); a file that cannot be used as a store is 3
        return BAD_INPUT
    runs_named: set[str] = set()  # ids given as experiments that are runs': said with the refusal
    try:
        with Store(args.db, read_only=True) as store:
            # --against names the other experiment: either id may be a run's
            named = (args.experiment, (args.against or "").partition(":")[0])
            runs_named = {name for name in named if name and store.get_run(name) is not None}
            if args.by_template:
                split = args.split or "held_out"
                report = template_breakdown(store, args.experiment, split)
                if not report["variants"]:  # a header over nothing read like a result
                    print(f"error: {_no_traces(store, args.experiment, split)}", file=sys.stderr)
                    return 2
            elif args.against:
                against, _, variant = args.against.partition(":")
                report = compare_report(store, args.experiment, against, variant)
            else:
                report = experiment_report(store, args.experiment)
    except StoreError as exc:  # held by another process, a newer schema, not a store
        return store_unusable(exc)
    except IncomparableExperiments as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UnknownExperiment as exc:
        known = "; ".join(f"{e['experiment_id']} ({e['name']}, {e['runs']} runs)" for e in exc.known) or "none"
        db = shlex.quote(args.db)
        hint = (f" ({exc.experiment_id} is a run: `python -m engine status --db {db}` shows its evaluations, "
                f"`python -m engine swap --db {db} --run {exc.experiment_id}` which stage moved them)"
                if exc.experiment_id in runs_named else "")
        print(f"error: no experiment {exc.experiment_id!r} in {args.db}{hint}; known experiments: {known}",
              file=sys.stderr)
        return 2
    if args.json:
        print_json(report)
    else:
        render = breakdown_markdown if args.by_template else compare_markdown if args.against else report_markdown
        print(render(report))
    return 0


def _no_traces(store: Any, experiment_id: str, split: str) -> str:
    """Why a per-template breakdown of ``split`` is empty: the splits the experiment's runs did evaluate, or none."""
    done = sorted(store.query("SELECT DISTINCT e.split FROM experiment_runs r JOIN eval_traces e USING (run_id) "
                              "WHERE r.experiment_id = ?", [experiment_id])["split"])
    if not done:
        return f"experiment {experiment_id} has no evaluation traces yet: none of its runs has been evaluated"
    return (f"experiment {experiment_id} never evaluated {split} (its runs evaluated {', '.join(done)}; "
            f"evaluate.splits): pick one with --split")
