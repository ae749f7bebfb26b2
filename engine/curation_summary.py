"""What the curators did to each iteration's preference pairs, and what DPO made of the pairs it trained on.

``pair_curation_summary(store, run_id)`` returns one dict per iteration that has pairs, oldest first:

* ``pairs``: the rule's pairs; ``overrides``: the effective pairs per live curator action now (``swap``,
  ``exclude``, ``tie``, ``choose``), ``reviewed``: pairs somebody acted on or marked "looks right";
* ``trained_with``: the same counts when ``train_planner`` ran (recorded by the stage, ``None`` for a run trained
  before the stage recorded them) and ``pending``: the pairs whose training row differs now from the one the
  checkpoint was trained with (``changed_pairs``: a pair in one set and not the other, or with other plans), i.e. what
  a re-training of this iteration would change. Decisions that cancel out (a swap undone, an exclude then a restore,
  a "looks right") change nothing and count 0;
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

from engine.review_trail import review_progress
from engine.store import Store
from engine.views import effective_pairs_sql

ACTIONS = ("swap", "exclude", "tie", "choose")


def live_pair_actions(store: Store, run_id: str, iteration: int, eff: pd.DataFrame | None = None) -> dict[str, int]:
    """The effective pairs (``eff``, read when not given) per live curator action (``ACTIONS``) plus
    ``newest_override``: the newest row of this iteration's pair log (overrides, reviews and undo rows; -1 when none),
    the position the pairs were read at. What ``train_planner`` records as it reads the pairs."""
    eff = store.effective_pairs(run_id, iteration) if eff is None else eff
    counts = {a: int((eff["override_action"] == a).sum()) for a in ACTIONS}
    # Undo rows included: ``pairs_as_of`` replays the log up to this row, and an undo is part of that state. (Runs
    # recorded before held the newest *live* row instead; replayed the same way, that is exact unless, before the
    # training, a curator undid an action older than another curator's still-live one.)
    newest = store.query("SELECT coalesce(max(override_id), -1) AS n FROM overrides o WHERE o.run_id = ? AND "
                         "o.iteration = ? AND o.target IN ('pair', 'pair_review')", [run_id, iteration])["n"][0]
    return {**counts, "newest_override": int(newest)}


# LIVE_OVERRIDE as the log stood at row $upto: rows after it (and undo rows after it) had not happened yet.
_LIVE_AS_OF = """o.override_id <= $upto AND o.action <> 'undo' AND NOT EXISTS (
    SELECT 1 FROM overrides u WHERE u.run_id = o.run_id AND u.action = 'undo' AND u.override_id <= $upto
        AND json_extract_string(u.after_json, '$.undoes') = CAST(o.override_id AS VARCHAR))"""


def pairs_as_of(store: Store, run_id: str, iteration: int, upto: int) -> pd.DataFrame:
    """The effective pairs as they were when the override log's newest row was ``upto`` (``newest_override``): the
    same query as ``Store.effective_pairs``, with only the log rows up to ``upto``."""
    sql = effective_pairs_sql(live=_LIVE_AS_OF)
    return store.query(f"{sql} SELECT * FROM eff", {"run": run_id, "it": iteration, "upto": int(upto)})


def _training_rows(eff: pd.DataFrame) -> dict[tuple[str, int, int], tuple[int, int]]:
    """What DPO trains on (``engine.export.pair_rows``): per pair key, its (chosen_k, rejected_k), excluded and tied
    pairs left out (an exclude and a tie are the same to the training data)."""
    kept = eff[~eff["excluded"] & ~eff["tie"]]
    return {(str(t), int(s), int(i)): (int(c), int(r))
            for t, s, i, c, r in zip(kept["task_id"], kept["step"], kept["pair_idx"], kept["chosen_k"],
                                     kept["rejected_k"])}


def changed_pairs(before: pd.DataFrame, after: pd.DataFrame) -> int:
    """How many pairs train differently in ``after`` than in ``before`` (effective pairs): in one and not the other,
    or with other plans.

    A count of the decisions made since the training would overcount: a swap then its undo, an exclude then a
    restore, or "looks right" leave the data as it was, and a restore is a change only when the checkpoint was
    trained with the override it removes. Comparing the data itself counts exactly what a re-training would change."""
    was, now = _training_rows(before), _training_rows(after)
    return sum(was.get(key) != now.get(key) for key in was.keys() | now.keys())


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
            then = pairs_as_of(store, run_id, it, int(recorded.get("newest_override", -1)))
            pending = changed_pairs(then, eff)
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
