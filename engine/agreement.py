"""How often curators agreed with the critic: ``agreement(store, run_id, iteration=None)``.

Read-only over the store's verdicts and the override log: a verdict counts as reviewed when it has a live curator
decision or, without one, a latest "looks right" review (which leaves the critic's verdict standing, so it agrees):
the ``agrees_with_critic`` column of ``engine.verdict_views`` (``AGREES_WITH_CRITIC``), so this report and the critic
queue's "overruled" filter read one rule. The verdict side of curation (``engine.verdict_curation``) names it in
its contract.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from engine.actions import tools_of
from engine.store import Store


def agreement(store: Store, run_id: str, iteration: int | None = None) -> dict[str, Any]:
    """How often the curators agreed with the critic, over the verdicts they reviewed: those with a live decision
    (the latest override, judged by one SQL expression, ``engine.verdict_views.AGREES_WITH_CRITIC``, shared with the
    critic queue's "overruled" filter) and those without one that a curator marked "looks right" (action
    ``reviewed``: the critic's verdict was left standing, so it agrees). A "looks right" on an overridden verdict
    confirms the override, and is judged as the override; a verdict restored with nothing after it is not reviewed.

    Returns ``{"verdicts", "reviewed", "agreed", "disagreed", "rate" (None when nothing reviewed),
    "by_action": {curator action (``reviewed`` for "looks right"): {"reviewed", "agreed"}}, "by_status": {critic
    status: {...}}, "by_domain": {domain: {...}}, "by_tool": {tool the grounding calls: {...}}, "by_curator":
    {curator of the live decision, or of the latest "looks right": {...}}, "disagreements": [{"task_id", "step",
    "k", "domain", "status", "action", "tools"}]}`` (the disagreements are the items to open next: where curators
    overruled the critic). A grounding that calls two tools counts once for each.
    """
    rows = store.verdict_rows(run_id, iteration)
    tables: dict[str, dict[str, dict[str, int]]] = {"by_action": {}, "by_status": {}, "by_domain": {},
                                                     "by_tool": {}, "by_curator": {}}
    disagreements: list[dict[str, Any]] = []
    agreed = n = 0
    for row in rows.itertuples(index=False):
        if pd.isna(row.agrees_with_critic):  # neither decided on nor marked "looks right"
            continue
        ok = bool(row.agrees_with_critic)
        if pd.notna(row.override_action):
            action, curator = row.override_action, str(row.curator)
        else:
            action, curator = "reviewed", str(row.looks_right_curator)
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
