"""Iteration-to-iteration change of one run: the exact McNemar test between consecutive evaluated iterations.

Contract: ``iteration_changes(store, run_id) -> list[dict]`` reads only ``eval_traces`` (per-task ``correct`` of
each evaluated iteration) and returns, for every pair of consecutive iterations that have traces (t_prev, t) and
every split, ``{"split", "before", "after", "gained", "lost", "p", "n"}`` from ``engine.stats.mcnemar`` on the tasks
of that split both iterations evaluated (``n`` of them; a task in only one iteration is left out). Rows are ordered
by ``after`` then split; a run with fewer than two evaluated iterations gives ``[]``.
"""

from __future__ import annotations

from typing import Any

from engine.stats import mcnemar
from engine.store import Store


def iteration_changes(store: Store, run_id: str) -> list[dict[str, Any]]:
    """McNemar between consecutive evaluated iterations of ``run_id``, per split (see the module docstring)."""
    df = store.query("SELECT iteration, split, task_id, correct FROM eval_traces WHERE run_id = ? "
                     "ORDER BY iteration, split, task_id", [run_id])
    outcomes: dict[int, dict[str, dict[str, bool]]] = {}
    for it, split, task_id, correct in df.itertuples(index=False):
        outcomes.setdefault(int(it), {}).setdefault(split, {})[task_id] = bool(correct)
    iterations = sorted(outcomes)
    rows = []
    for before, after in zip(iterations, iterations[1:]):
        for split in sorted(set(outcomes[before]) & set(outcomes[after])):
            old, new = outcomes[before][split], outcomes[after][split]
            tasks = sorted(set(old) & set(new))
            test = mcnemar([old[t] for t in tasks], [new[t] for t in tasks])
            rows.append({"split": split, "before": before, "after": after, **test})
    return rows
