"""The Metrics tab's tables of one run, as markdown: the stored planner x grounder swap table
(``engine.swap.stored_swaps``) and the iteration-to-iteration McNemar tests (``engine.changes.iteration_changes``).

Only renders: nothing here computes a swap (that evaluates models and writes ``swaps``: the Metrics tab's button
starts ``studio.jobs.swap_job``, or ``python -m engine swap`` with the studio stopped, as the hint says) or a
statistic.

* ``swap_markdown(store, run_id)``: rows ``P{a}G{b}`` and the grounders on gold plans (``G{b}``), each named as the
  CLI report names it ("stage 1 only: planner trained", "starting grounder on gold plans"), one column per split
  x domain (``"all"`` last when a split has several domains) holding ``correct/n (xx.x%)``; then the McNemar rows
  (stage 1 alone, stage 2 alone, both, grounder on gold plans: ``+gained / −lost / p=...``). A run without swap rows
  gives one line with the CLI command that computes them; on Spaces (``spaces``; None: env ``SPACE_ID`` set, as
  ``app.py`` decides) a line in words instead, since a visitor has no shell there and the server's paths are not
  theirs to see.
* ``changes_markdown(store, run_id)``: split x consecutive iterations: gained, lost, exact McNemar p, tasks.
"""

from __future__ import annotations

import os
from typing import Any

from engine.changes import iteration_changes
from engine.store import Store
from engine.swap import stored_swaps


def swap_hint(store: Store, run_id: str, spaces: bool | None = None) -> str:
    if spaces is None:
        spaces = bool(os.environ.get("SPACE_ID"))
    if spaces:
        return (f"No swap table stored for run `{run_id}`. It evaluates every pairing of the run's planners and "
                "grounders, which this demo Space does not do: it is computed with the command-line tool "
                "(`python -m engine swap`) on a local copy of MOAT Studio.")
    # DuckDB lets one process open the store and this studio holds it: the command cannot run beside the studio,
    # so the hint says how to run it rather than suggesting a command that fails with "open in another process".
    return (f"No swap table stored for run `{run_id}`. It evaluates the swapped agents: press *Compute the swap "
            "table* below (a job on this studio's worker), or, with the studio stopped (it holds the store: DuckDB "
            f"admits one process per file), run `python -m engine swap --db {store.path} --run {run_id}`. An "
            "experiment (`python -m engine experiment`) computes it for the variants its file lists under `swap`.")


def _columns(cells: list[dict[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    splits: dict[str, set[str]] = {}
    for summary in cells:
        for split, domains in summary.items():
            splits.setdefault(split, set()).update(domains)
    out = []
    for split, domains in splits.items():
        named = sorted(d for d in domains if d != "all")
        out += [(split, d) for d in named] + ([(split, "all")] if len(named) != 1 else [])
    return out


def _accuracy(values: dict[str, Any] | None) -> str:
    if not values or not values.get("n"):
        return "–"
    return f"{values['correct']}/{values['n']} ({100 * values['correct'] / values['n']:.1f}%)"


def _test(result: dict[str, Any] | None) -> str:
    if not result or "gained" not in result:
        return "–"
    return f"+{result['gained']} / −{result['lost']} / p={result['p']:.3g}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def swap_markdown(store: Store, run_id: str, spaces: bool | None = None) -> str:
    """The run's stored swap table and its McNemar rows, or the CLI hint (see the module docstring)."""
    table = stored_swaps(store, run_id)
    if table is None:
        return swap_hint(store, run_id, spaces)
    base, after = table["base"], table["after"]
    rows = {**table["cells"], **table["gold_plans"]}
    columns = _columns(list(rows.values()))
    heads = [f"{split.replace('_', '-')} {domain}" for split, domain in columns]
    # The CLI report's words (engine.report_markdown): which agent trained, and which grounder reads gold plans.
    start = "starting" if base == 0 else f"iteration {base}"
    labels = {f"P{base}G{base}": "starting agents" if base == 0 else f"agents after iteration {base}",
              f"P{after}G{base}": "stage 1 only: planner trained",
              f"P{base}G{after}": "stage 2 only: grounder trained", f"P{after}G{after}": "both: the trained system",
              f"G{base}": f"{start} grounder on gold plans", f"G{after}": "trained grounder on gold plans"}
    lines = [f"**Swap table** of `{run_id}`: planners (P) x grounders (G) after iterations {base} and {after}, on the "
             "run's evaluation tasks (correct/n)", "", _row(["agents", *heads]), _row(["---"] * (len(heads) + 1))]
    for cell, summary in rows.items():
        label = labels.get(cell, "grounder on gold plans")
        lines.append(_row([f"{cell} ({label})", *(_accuracy(summary.get(s, {}).get(d)) for s, d in columns)]))
    lines += ["", "**Which stage moved what**: exact McNemar on the same tasks (+gained / −lost / p)", "",
              _row(["change", *heads]), _row(["---"] * (len(heads) + 1))]
    for test in table["tests"].values():
        lines.append(_row([f"{test['label']}: {test['after']} vs {test['before']}",
                           *(_test(test["results"].get(s, {}).get(d)) for s, d in columns)]))
    if not table["tests"]:
        lines.append(_row(["(no McNemar rows stored)", *("–" for _ in heads)]))
    return "\n".join(lines)


def changes_markdown(store: Store, run_id: str | None) -> str:
    """Consecutive iterations compared on the same tasks, per split (exact McNemar)."""
    rows = iteration_changes(store, run_id) if run_id else []
    if not rows:
        return "**Iteration-to-iteration change**: needs two evaluated iterations with per-task traces."
    lines = ["**Iteration-to-iteration change** on the same tasks (exact McNemar)", "",
             _row(["split", "iterations", "gained", "lost", "p", "tasks"]), _row(["---"] * 6)]
    for r in rows:
        lines.append(_row([r["split"].replace("_", "-"), f"{r['before']} → {r['after']}", str(r["gained"]),
                           str(r["lost"]), f"{r['p']:.3g}", str(r["n"])]))
    return "\n".join(lines)
