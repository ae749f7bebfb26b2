"""``python -m engine swap``: the planner x grounder swap (attribution) table of a run.

Contract: ``swap --run R [--db D] [--base 0] [--after N] [--json | --markdown]`` builds ``engine.swap.swap_table``
(it writes the run's ``swaps`` rows, so the store is opened for writing) and prints it as markdown (default): one row
per planner/grounder combination with correct/n and % per split x domain and the row's grounder on gold plans, the
paired McNemar tests of which stage moved what, and the capability gap (the base row of ``--base 0`` is labelled
"starting agents", with ", warm-started" when ``[warm_start]`` trained them); ``--json`` prints the table as one JSON
object. A progress bar on stderr counts the cells computed (``--quiet``: none, nor the libraries' bars). A missing
store file (``error: no store at ...``, the wording of every command), an unknown run, an ``--after`` whose evaluate
stage is not done, ``--base`` not below ``--after``, a run whose planner and grounder are one set of weights
(``agents.topology = "shared"`` without LoRA: no stage can be swapped apart), or a model directory a cell would load
that is missing (``planner.path: assets/demo/planner: no such model directory (...)``, as ``step`` says it; a
relative path is relative to the working directory) prints ``error: ...`` on stderr and exits 2; a store that
cannot be opened (held by another process, newer schema) prints one ``error: ...`` line on stderr and exits 3, as
every command does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.commands._common import BAD_INPUT, DEFAULT_DB, add_quiet_flag, print_json, store_missing, store_unusable

HELP = ("Planner x grounder swap table: which stage (DPO planner, SFT grounder) moved the accuracy. Evaluates the two "
        "swapped pairs of agents (minutes on a CPU; cells the run's evaluate stage or the evaluation cache hold are "
        "reused), writes them to the store's swaps table and caches them in <run.workdir>/eval_cache.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run id (see `python -m engine status`)")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB store (default: {DEFAULT_DB})")
    parser.add_argument("--base", type=int, default=0,
                        help="the iteration whose agents are the baseline (default: 0, the starting agents)")
    parser.add_argument("--after", type=int, default=None,
                        help="the iteration whose agents are swapped in (default: the last one evaluated)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument("--markdown", action="store_true", help="print markdown tables (the default)")
    add_quiet_flag(parser)


def run(args: argparse.Namespace) -> int:
    from engine.commands.run import progress_printer
    from engine.errors import ConfigError
    from engine.store import Store, StoreError
    from engine.swap import SwapError, swap_table

    if store_missing(args.db):
        return BAD_INPUT
    try:
        with Store(args.db) as store:
            if store.get_run(args.run) is None:  # named with the file, as run, step and export do
                print(f"error: {store.unknown_run(args.run, args.db)}", file=sys.stderr)
                return BAD_INPUT
            table = swap_table(store, args.run, base=args.base, after=args.after,
                               progress=progress_printer(args.quiet))
    except (SwapError, ConfigError) as exc:  # ConfigError: a CheckpointError, a model directory that is not there
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except StoreError as exc:  # held by another process, a newer schema, not a store: say so, no traceback
        return store_unusable(exc)
    if args.json:
        print_json(table)
    else:
        print(markdown(table))
    return 0


# -- markdown -------------------------------------------------------------------------------------------------------

def _split(split: str) -> str:
    return split.replace("_", "-")


def _columns(summary: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(split, domain) columns: each domain, then "all" when a split has more than one domain."""
    out = []
    for split, domains in summary.items():
        names = sorted(d for d in domains if d != "all")
        out += [(split, d) for d in names] + ([(split, "all")] if len(names) > 1 else [])
    return out


def _accuracy(values: dict[str, Any] | None) -> str:
    if not values or not values.get("n"):
        return "–"
    return f"{int(values['correct'])}/{int(values['n'])} ({100 * values['accuracy']:.1f}%)"


def _gap(values: dict[str, Any] | None) -> str:
    return f"{values['gap_ppl']:.4g}" if values and "gap_ppl" in values else "–"


def _test(result: dict[str, Any] | None) -> str:
    return f"+{result['gained']} −{result['lost']} (p={result['p']:.3g})" if result else "–"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _base_label(table: dict[str, Any]) -> str:
    """What the base cell's agents are: at iteration 0 the starting agents (as the report and the studio call them),
    warm-started only where ``[warm_start]`` trained them -- otherwise they are the models as loaded."""
    if table["base"]:
        return f"after iteration {table['base']}"
    warm = table.get("warm_started", [])
    if not warm:
        return "starting agents"
    return "starting agents, warm-started" if len(warm) == 2 else f"starting agents, {warm[0]} warm-started"


def markdown(table: dict[str, Any]) -> str:
    base, after, cells, gold = table["base"], table["after"], table["cells"], table["gold_plans"]
    columns = _columns(cells[f"P{base}G{base}"])
    splits = list(dict.fromkeys(split for split, _ in columns))
    labels = {f"P{base}G{base}": _base_label(table),
              f"P{after}G{base}": "stage 1 only", f"P{base}G{after}": "stage 2 only", f"P{after}G{after}": "both"}

    def name(cell: str) -> str:
        return cell.replace("G", " G") if cell.startswith("P") else cell

    def get(summary: dict[str, Any], split: str, domain: str) -> dict[str, Any] | None:
        return summary.get(split, {}).get(domain)

    heads = [f"{_split(s)} {d}" for s, d in columns]
    gold_head = f"grounder on gold plans ({' · '.join(_split(s) for s in splits)})"
    lines = [f"Swap table of run {table['run_id']}: planners and grounders after iterations {base} and {after}, "
             f"on the run's {len(table['tasks'])} evaluation tasks (accuracy, correct/n)", "",
             _row(["agents", *heads, gold_head]), _row(["---"] * (len(heads) + 2))]
    for cell, summary in cells.items():
        grounder = "G" + cell.split("G")[1]
        on_gold = " · ".join(_accuracy(get(gold.get(grounder, {}), s, "all")) for s in splits)
        lines.append(_row([f"{name(cell)} ({labels[cell]})", *(_accuracy(get(summary, s, d)) for s, d in columns),
                           f"{grounder}: {on_gold}"]))
    origins = table.get("reused_from", {})
    reused = "; ".join(name(c) + (f" from run {origins[c]}" if c in origins else "")
                       for c in table["reused"]) or "none"
    lines += ["", f"Reused, from the evaluate stage's stored metrics or the evaluation cache (same agents, tasks and "
              f"greedy decoding): {reused}; the other cells were computed ({table['seconds']:.1f} s).", ""]

    lines += ["Which stage moved what: exact McNemar on the same tasks (+gained −lost, two-sided p)", "",
              _row(["change", *heads]), _row(["---"] * (len(heads) + 1))]
    for test in table["tests"].values():
        lines.append(_row([f"{test['label']}: {name(test['after'])} vs {name(test['before'])}",
                           *(_test(get(test["results"], s, d)) for s, d in columns)]))

    lines += ["", "Capability gap: mean PPL of the gold actions under the plans (lower: the agents fit better)", "",
              _row(["agents", *heads]), _row(["---"] * (len(heads) + 1))]
    for cell, summary in cells.items():
        lines.append(_row([name(cell), *(_gap(get(summary, s, d)) for s, d in columns)]))
    for cell, summary in gold.items():
        lines.append(_row([f"{cell} on gold plans", *(_gap(get(summary, s, d)) for s, d in columns)]))
    return "\n".join(lines)
