"""What the curators did to each iteration's preference pairs, and what DPO made of the pairs it trained on.

``pair_curation_summary(store, run_id)`` returns one dict per iteration that has pairs, oldest first:

* ``pairs``: the rule's pairs; ``overrides``: the effective pairs per live curator action now (``swap``,
  ``exclude``, ``tie``, ``choose``), ``reviewed``: pairs somebody acted on or marked "looks right";
* ``trained_with``: the same counts when ``train_planner`` ran (recorded by the stage, ``None`` for a run trained
  before the stage recorded them) and ``pending``: live pair actions newer than that training (they change the
  next re-training of this iteration, not the checkpoint that exists);
* ``margin_auto``/``margin_trained``: the mean log-PPL margin (rejected - chosen) over the rule's pairs and over the
  pairs DPO trains on now (neither excluded nor tie, swaps and choices applied): a swap of a wrongly ordered pair
  turns a negative-signal pair into a positive one;
* ``dpo``: from TRL's logs of that training, the first and last ``rewards/margins`` and the last
  ``rewards/accuracies`` (the DPO implicit reward of chosen over rejected: did the planner learn the pairs it was
  given), ``None`` when the planner was not trained.

Pure reads of ``pairs``, ``overrides``, ``stages`` and ``train_logs``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from engine.curation import review_progress
from engine.store import Store
from engine.views import LIVE_OVERRIDE

ACTIONS = ("swap", "exclude", "tie", "choose")


def live_pair_actions(store: Store, run_id: str, iteration: int, eff: pd.DataFrame | None = None) -> dict[str, int]:
    """The effective pairs (``eff``, read when not given) per live curator action (``ACTIONS``) plus
    ``newest_override`` (the newest live pair override or review id, -1 when none): what ``train_planner`` records
    as it reads the pairs."""
    eff = store.effective_pairs(run_id, iteration) if eff is None else eff
    counts = {a: int((eff["override_action"] == a).sum()) for a in ACTIONS}
    newest = store.query(f"SELECT coalesce(max(override_id), -1) AS n FROM overrides o WHERE o.run_id = ? AND "
                         f"o.iteration = ? AND o.target IN ('pair', 'pair_review') AND {LIVE_OVERRIDE}",
                         [run_id, iteration])["n"][0]
    return {**counts, "newest_override": int(newest)}


def _mean(values) -> float | None:
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(values) / len(values) if values else None


def _dpo_margins(store: Store, run_id: str, iteration: int) -> dict[str, float] | None:
    logs = store.train_log_rows(run_id, "train_planner")
    logs = logs[logs["iteration"] == iteration]
    margins, accuracies = [], []
    for text in logs["logs_json"]:
        line = json.loads(text)
        if "rewards/margins" in line:
            margins.append(float(line["rewards/margins"]))
            accuracies.append(float(line.get("rewards/accuracies", math.nan)))
    if not margins:
        return None
    return {"first_margin": margins[0], "last_margin": margins[-1], "last_accuracy": accuracies[-1],
            "logged": len(margins)}


def pair_curation_summary(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One summary per iteration with pairs (see the module docstring)."""
    out = []
    iterations = store.query("SELECT DISTINCT iteration FROM pairs WHERE run_id = ? ORDER BY iteration", [run_id])
    for it in (int(i) for i in iterations["iteration"]):
        eff = store.effective_pairs(run_id, it)
        now = live_pair_actions(store, run_id, it, eff)
        progress = review_progress(store, run_id, it, "pair")
        stage = store.stage_status(run_id, it).get("train_planner") or {}
        recorded = (stage.get("counts") or {}).get("curation") if stage.get("status") == "done" else None
        pending = None
        if recorded is not None:
            pending = int(store.query(
                f"SELECT count(*) AS n FROM overrides o WHERE o.run_id = ? AND o.iteration = ? AND "
                f"o.target = 'pair' AND o.override_id > ? AND {LIVE_OVERRIDE}",
                [run_id, it, recorded.get("newest_override", -1)])["n"][0])
        auto = store.query("SELECT avg(rejected_logppl - chosen_logppl) AS margin FROM pairs "
                           "WHERE run_id = ? AND iteration = ?", [run_id, it]).iloc[0]
        trained = eff[~eff["excluded"] & ~eff["tie"]]
        out.append({
            "iteration": it, "pairs": progress["total"], "reviewed": progress["reviewed"],
            "overrides": {a: now[a] for a in ACTIONS},
            "trained_with": None if recorded is None else {a: int(recorded.get(a, 0)) for a in ACTIONS},
            "pending": pending,
            "margin_auto": _mean([auto["margin"]]),
            "margin_trained": _mean(trained["margin"]) if len(trained) else None,
            "dpo": _dpo_margins(store, run_id, it),
        })
    return out
