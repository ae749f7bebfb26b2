"""How often curators agreed with the critic: ``agreement(store, run_id, iteration=None)``.

Read-only over the store's verdicts and the override log: a verdict counts as reviewed when it has a live curator
decision (judged by ``engine.views.AGREES_WITH_CRITIC``) or, without one, a latest "looks right" review (which leaves
the critic's verdict standing, so it agrees). ``engine.curation`` re-exports it as part of the curation contract.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from engine.actions import tools_of
from engine.store import Store
from engine.views import LIVE_OVERRIDE


def agreement(store: Store, run_id: str, iteration: int | None = None) -> dict[str, Any]:
    """How often the curators agreed with the critic, over the verdicts they reviewed: those with a live decision
    (the latest override, judged by one SQL expression, ``engine.views.AGREES_WITH_CRITIC``, shared with the critic
    queue's "overruled" filter) and those without one that a curator marked "looks right" (action ``reviewed``: the
    critic's verdict was left standing, so it agrees). A "looks right" on an overridden verdict confirms the
    override, and is judged as the override; a verdict restored with nothing after it is not reviewed.

    Returns ``{"verdicts", "reviewed", "agreed", "disagreed", "rate" (None when nothing reviewed),
    "by_action": {curator action (``reviewed`` for "looks right"): {"reviewed", "agreed"}}, "by_status": {critic
    status: {...}}, "by_domain": {domain: {...}}, "by_tool": {tool the grounding calls: {...}}, "by_curator":
    {curator of the live decision, or of the latest "looks right": {...}}, "disagreements": [{"task_id", "step",
    "k", "domain", "status", "action", "tools"}]}`` (the disagreements are the items to open next: where curators
    overruled the critic). A grounding that calls two tools counts once for each.
    """
    rows = store.verdict_rows(run_id, iteration)
    looked = _looks_right(store, run_id, iteration)
    tables: dict[str, dict[str, dict[str, int]]] = {"by_action": {}, "by_status": {}, "by_domain": {},
                                                     "by_tool": {}, "by_curator": {}}
    disagreements: list[dict[str, Any]] = []
    agreed = n = 0
    for row in rows.itertuples(index=False):
        key = (int(row.iteration), row.task_id, int(row.step), int(row.k))
        if pd.notna(row.override_action):
            action, curator, ok = row.override_action, str(row.curator), bool(row.agrees_with_critic)
        elif key in looked:
            action, curator, ok = "reviewed", looked[key], True
        else:
            continue
        status, domain = row.status, str(row.domain)
        tools = tools_of(row.grounding_actions)
        n += 1
        agreed += ok
        for table, names in (("by_action", [action]), ("by_status", [status]), ("by_domain", [domain]),
                             ("by_tool", tools), ("by_curator", [curator])):
            for name in names:
                entry = tables[table].setdefault(name, {"reviewed": 0, "agreed": 0})
                entry["reviewed"] += 1
                entry["agreed"] += int(ok)
        if not ok:
            disagreements.append({"task_id": row.task_id, "step": int(row.step), "k": int(row.k), "domain": domain,
                                  "status": status, "action": action, "tools": tools})
    return {
        "verdicts": len(rows),
        "reviewed": n,
        "agreed": agreed,
        "disagreed": n - agreed,
        "rate": agreed / n if n else None,
        **tables,
        "disagreements": disagreements,
    }


def _looks_right(store: Store, run_id: str, iteration: int | None) -> dict[tuple[int, str, int, int], str]:
    """``{(iteration, task_id, step, k): curator}`` for the verdicts whose latest live curator row (a decision, a
    restore or a review) is a "looks right" review."""
    latest = store.query(
        f"""SELECT iteration, task_id, step, k, action, curator FROM (
                SELECT o.*, row_number() OVER (PARTITION BY iteration, task_id, step, k ORDER BY override_id DESC)
                    AS rn
                FROM overrides o WHERE o.run_id = $run AND ($it IS NULL OR o.iteration = $it)
                    AND o.target IN ('verdict', 'verdict_review') AND {LIVE_OVERRIDE})
            WHERE rn = 1 AND action = 'reviewed'""",
        {"run": run_id, "it": None if iteration is None else int(iteration)})
    return {(int(r.iteration), r.task_id, int(r.step), int(r.k)): str(r.curator)
            for r in latest.itertuples(index=False)}
