"""Curator overrides of DPO pairs and critic verdicts, and the training data they produce.

Contract (shared by the studio and the CLI):

* Overrides are append-only rows in ``overrides``; the latest row per target wins and a latest ``restore`` row
  means "back to what the engine decided". Every row records ``curator``, ``reason`` and ``before_json`` /
  ``after_json`` (the effective state before and after) so the history is auditable.
* Pair overrides (``target="pair"``) are keyed by ``(run_id, iteration, task_id, step, pair_idx)``; ``pair_idx``
  (0 unless a multi-pair rule made several pairs for one task-step) is the overrides table's own column (also kept
  in ``after_json`` as part of the state it describes). Actions:
  ``swap`` flips the auto pair's chosen/rejected (and logppls); swapping a swapped pair writes a ``restore``;
  swapping a chosen pair writes a ``choose`` with the two plans reversed. ``exclude`` and ``tie`` keep the row,
  flagged, but take it out of training/export. ``choose`` names any two scored, differing plans of the task-step
  (``after_json["chosen_k"/"rejected_k"]``; logppls come from ``scores``) and may create a pair the rule did not.
  The auto ``pairs`` rows may be deleted and rebuilt by the pairs stage: overrides refer to the key, not the row,
  so they apply to the rebuilt pair (an override of a pair the rule no longer makes is ignored, except ``choose``).
* Verdict overrides (``target="verdict"``) are keyed by ``(run_id, iteration, task_id, step, k)``: ``keep_original``
  (train on the grounding as it was), ``accept_correction`` (train on the critic's correction), ``edit`` (train on
  curator-written actions, validated with ``parse_actions`` and previewed with the executor), ``drop`` (no
  training record), ``restore``. The pair and verdict actions return the id of the override row they append
  (``edit_correction``: a ``SavedEdit``, that id with the execution preview of the edited actions).
* ``mark_reviewed`` records that a curator looked at a pair or verdict and left it as it is (a row with target
  ``pair_review`` / ``verdict_review``: never part of the effective data); ``review_progress`` counts the items
  anybody (and one curator) has acted on or reviewed, for the "reviewed N of M" counters; ``looked_right`` names,
  per item, the curator whose "looks right" is its latest live row (the trace a review leaves on the page).
* ``replaced_decision`` names the live decision (action, curator, id) an override took the place of (a later
  curator's decision wins silently otherwise: the log keeps both, the page showed only the latest).
* ``undo_last`` takes back a curator's latest action (pairs or verdicts) by appending an ``undo`` row that names
  it; undone rows and undo rows never count as an override or a review (``engine.views.LIVE_OVERRIDE``).
* ``effective_pairs`` / ``effective_sft_records`` give the data after overrides; ``agreement`` (``engine.agreement``,
  re-exported here) measures how often
  curators agreed with the critic, over the verdicts with a live decision or a "looks right" review (a review
  leaves the critic's verdict standing: it agrees with it).
* Each action reads the current state and appends its row under ``Store.serialized()``: concurrent sessions acting
  on one item are applied one after the other, each seeing the previous one's override (swapping a pair twice
  at once still ends where it started, and ``before_json`` chains without gaps).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd

from engine.actions import parse_actions
from engine.agreement import agreement  # noqa: F401  (re-exported: part of curation's contract)
from engine.dbutil import loads, records
from engine.executor import ExecutionResult
from engine.outcome import run_grounding, toolbox_for_run
from engine.store import Store
from engine.views import LIVE_OVERRIDE

PAIR_ACTIONS = ("swap", "exclude", "tie", "choose", "restore")
VERDICT_ACTIONS = ("keep_original", "accept_correction", "edit", "drop", "restore")
# Critic statuses that yield a training record without any override.
TRAINABLE_STATUSES = ("accepted", "corrected")


F = TypeVar("F", bound=Callable[..., Any])


def _atomic(fn: F) -> F:
    """Run a curator action (``fn(store, ...)``) under ``store.serialized()``: its read of the current state and its
    append form one step, so no other session's override lands in between."""

    @functools.wraps(fn)
    def wrapper(store: Store, *args: Any, **kwargs: Any) -> Any:
        with store.serialized():
            return fn(store, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class SavedEdit:
    """What ``edit_correction`` wrote: the execution preview of the edited actions (values, answer, error; also kept in
    the override's ``after_json``) and the id of the override row it appended. The caller names the edit by this id:
    reading ``max(override_id)`` back after the write could name a row another curator appended in between."""

    preview: ExecutionResult
    override_id: int


class InvalidActionsError(ValueError):
    """Curator-edited actions that do not parse; ``parse_error`` holds message, span and snippet."""

    def __init__(self, parse_error: Any):
        self.parse_error = parse_error
        super().__init__(f"invalid actions: {parse_error}")


# -- pairs -----------------------------------------------------------------------------------------------------------


def effective_pairs(store: Store, run_id: str, iteration: int) -> pd.DataFrame:
    """Auto pairs with overrides applied; columns include ``overridden``, ``excluded``, ``tie``,
    ``override_action`` and ``auto_chosen_k``/``auto_rejected_k`` (NULL for a curator-created pair)."""
    return store.effective_pairs(run_id, iteration)


def _current_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int, pair_idx: int) -> dict | None:
    df = store.effective_pairs(run_id, iteration, task_id=task_id)
    df = df[(df["step"] == step) & (df["pair_idx"] == pair_idx)]
    if not len(df):
        return None
    row = df.iloc[0]
    return {
        "chosen_k": int(row["chosen_k"]),
        "rejected_k": int(row["rejected_k"]),
        "action": None if pd.isna(row["override_action"]) else row["override_action"],
    }


def _require_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int, pair_idx: int) -> dict:
    pair = _current_pair(store, run_id, iteration, task_id, step, pair_idx)
    if pair is None:
        raise ValueError(f"no pair for task {task_id!r} step {step} (pair {pair_idx}) in iteration {iteration}")
    return pair


def _pair_override(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    action: str,
    before: dict | None,
    after: dict,
    curator: str,
    reason: str,
) -> int:
    return store.add_override(
        {
            "run_id": run_id,
            "iteration": iteration,
            "target": "pair",
            "task_id": task_id,
            "step": step,
            "k": None,
            "pair_idx": int(after.get("pair_idx", 0)),
            "action": action,
            "before_json": before,
            "after_json": after,
            "curator": curator,
            "reason": reason,
        }
    )


@_atomic
def swap_pair(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int = 0,
    *,
    pair_idx: int = 0,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Flip chosen and rejected; returns the override id. Swapping twice returns the pair to auto."""
    before = _require_pair(store, run_id, iteration, task_id, step, pair_idx)
    after = {"pair_idx": pair_idx, "chosen_k": before["rejected_k"], "rejected_k": before["chosen_k"]}
    if before["action"] == "swap":
        action = "restore"
    elif before["action"] == "choose":
        action = "choose"  # a flipped choice is still a choice: its ks do not come from the auto pair
    else:
        action = "swap"
    return _pair_override(store, run_id, iteration, task_id, step, action, before, after, curator, reason)


@_atomic
def _flag_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int, action: str, pair_idx: int,
               curator: str, reason: str) -> int:
    """Keep the pair's plans as they are and flag it (``exclude`` or ``tie``): out of training and export."""
    before = _require_pair(store, run_id, iteration, task_id, step, pair_idx)
    after = {"pair_idx": pair_idx, "chosen_k": before["chosen_k"], "rejected_k": before["rejected_k"]}
    return _pair_override(store, run_id, iteration, task_id, step, action, before, after, curator, reason)


def exclude_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int = 0, *, pair_idx: int = 0,
                 curator: str = "curator", reason: str = "") -> int:
    """Keep the pair visible but out of training and export."""
    return _flag_pair(store, run_id, iteration, task_id, step, "exclude", pair_idx, curator, reason)


def tie_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int = 0, *, pair_idx: int = 0,
             curator: str = "curator", reason: str = "") -> int:
    """Mark both plans as equally good: out of training, flagged ``tie``."""
    return _flag_pair(store, run_id, iteration, task_id, step, "tie", pair_idx, curator, reason)


def _plan_numbers(store: Store, run_id: str, iteration: int, task_id: str, step: int) -> str:
    """' (its plans are k=0-14)' for a refusal naming a plan number the task-step does not have; '' if it has none."""
    ks = sorted(int(k) for k in store.query(
        "SELECT DISTINCT k FROM plans WHERE run_id = ? AND iteration = ? AND task_id = ? AND step = ?",
        [run_id, iteration, task_id, step])["k"])
    if not ks:
        return ""
    listed = f"{ks[0]}-{ks[-1]}" if ks == list(range(ks[0], ks[-1] + 1)) and len(ks) > 2 else ", ".join(map(str, ks))
    return f" (its plans are k={listed})"


@_atomic
def choose_pair(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    chosen_k: int,
    rejected_k: int,
    *,
    pair_idx: int = 0,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Pair any two scored plans of the task-step; they must exist, differ, and have different texts."""
    chosen_k, rejected_k = int(chosen_k), int(rejected_k)
    if chosen_k == rejected_k:
        raise ValueError(f"chosen and rejected must be different plans (both are k={chosen_k})")
    plans = store.query(
        "SELECT p.k, p.text, s.logppl FROM plans p LEFT JOIN scores s USING (run_id, iteration, task_id, step, k) "
        "WHERE p.run_id = ? AND p.iteration = ? AND p.task_id = ? AND p.step = ? AND p.k IN (?, ?)",
        [run_id, iteration, task_id, step, chosen_k, rejected_k],
    )
    found = {int(r.k): r for r in plans.itertuples(index=False)}
    for k in (chosen_k, rejected_k):
        if k not in found:
            raise ValueError(f"task {task_id!r} step {step} has no plan k={k} in iteration {iteration}"
                             f"{_plan_numbers(store, run_id, iteration, task_id, step)}")
        if pd.isna(found[k].logppl):
            raise ValueError(f"plan k={k} of task {task_id!r} step {step} has no score yet")
    if found[chosen_k].text == found[rejected_k].text:
        raise ValueError(f"plans k={chosen_k} and k={rejected_k} have the same text; a pair needs two different plans")
    before = _current_pair(store, run_id, iteration, task_id, step, pair_idx)
    after = {"pair_idx": pair_idx, "chosen_k": chosen_k, "rejected_k": rejected_k}
    return _pair_override(store, run_id, iteration, task_id, step, "choose", before, after, curator, reason)


@_atomic
def restore_pair(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int = 0,
    *,
    pair_idx: int = 0,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Undo every override of the pair: back to what the pairing rule decided."""
    before = _current_pair(store, run_id, iteration, task_id, step, pair_idx)
    return _pair_override(
        store, run_id, iteration, task_id, step, "restore", before, {"pair_idx": pair_idx}, curator, reason
    )


# -- reviews --------------------------------------------------------------------------------------------------------

REVIEW_TARGETS = {"pair": "pair_review", "verdict": "verdict_review"}


@_atomic
def mark_reviewed(store: Store, run_id: str, iteration: int, target: str, task_id: str, step: int, index: int, *,
                  curator: str = "curator", reason: str = "") -> int:
    """Record "looked at, left as it is" for a pair (``index`` = pair_idx) or a verdict (``index`` = k)."""
    if target not in REVIEW_TARGETS:
        raise ValueError(f"target must be pair or verdict, not {target!r}")
    if target == "pair":
        _require_pair(store, run_id, iteration, task_id, step, index)
    else:
        _verdict(store, run_id, iteration, task_id, step, index)
    return store.add_override({"run_id": run_id, "iteration": iteration, "target": REVIEW_TARGETS[target],
                               "task_id": task_id, "step": step, "k": index if target == "verdict" else None,
                               "pair_idx": index if target == "pair" else None, "action": "reviewed",
                               "before_json": None, "after_json": None, "curator": curator, "reason": reason})


def review_progress(store: Store, run_id: str, iteration: int, target: str, curator: str = "") -> dict[str, int]:
    """``{"total", "reviewed", "mine"}``: the iteration's pairs (or verdicts), how many anybody has acted on or
    marked reviewed, and how many ``curator`` has."""
    if target not in REVIEW_TARGETS:
        raise ValueError(f"target must be pair or verdict, not {target!r}")
    index = "coalesce(pair_idx, 0)" if target == "pair" else "k"
    table = "pairs" if target == "pair" else "verdicts"
    total = int(store.query(f"SELECT count(*) AS n FROM {table} WHERE run_id = ? AND iteration = ?",
                            [run_id, iteration])["n"][0])
    acted = store.query(
        f"""SELECT count(DISTINCT (task_id, step, {index})) AS anybody,
                  count(DISTINCT (task_id, step, {index})) FILTER (WHERE curator = ?) AS mine
           FROM overrides o WHERE run_id = ? AND iteration = ? AND target IN (?, ?) AND {LIVE_OVERRIDE}""",
        [curator, run_id, iteration, target, REVIEW_TARGETS[target]]).iloc[0]
    return {"total": total, "reviewed": int(acted["anybody"]), "mine": int(acted["mine"])}


def looked_right(store: Store, run_id: str, iteration: int, target: str,
                 task_ids: list[str] | None = None) -> dict[tuple[str, int, int], str]:
    """``{(task_id, step, index): curator}`` for the pairs (``index`` = pair_idx) or verdicts (``index`` = k) whose
    latest live curator row is a "looks right" (``mark_reviewed``, after any decision or restore): who last left the
    item as it stood. The same rule as the critic queue's ``looks_right_curator`` column (``engine.verdict_views``).
    ``task_ids`` narrows the read to some tasks (a page of the queue)."""
    if target not in REVIEW_TARGETS:
        raise ValueError(f"target must be pair or verdict, not {target!r}")
    index = "coalesce(o.pair_idx, 0)" if target == "pair" else "o.k"
    params: dict[str, Any] = {"run": run_id, "it": int(iteration), "target": target,
                              "review": REVIEW_TARGETS[target]}
    scope = ""
    if task_ids is not None:
        scope, params["tasks"] = "AND list_contains($tasks, o.task_id)", [str(t) for t in task_ids]
    rows = store.query(
        f"""SELECT task_id, step, idx, curator FROM (
                SELECT o.task_id, o.step, {index} AS idx, o.action, o.curator,
                       row_number() OVER (PARTITION BY o.task_id, o.step, {index} ORDER BY o.override_id DESC) AS rn
                FROM overrides o WHERE o.run_id = $run AND o.iteration = $it AND o.target IN ($target, $review)
                    {scope} AND {LIVE_OVERRIDE})
            WHERE rn = 1 AND action = 'reviewed'""", params)
    return {(str(r.task_id), int(r.step), int(r.idx)): str(r.curator) for r in rows.itertuples(index=False)}


def replaced_decision(store: Store, override_id: int) -> dict[str, Any] | None:
    """The live decision that override ``override_id`` took the place of: the latest live decision row (target
    ``pair`` or ``verdict``) on the same item before it, as ``{"override_id", "action", "curator"}``; None when there
    was none, or when that row was a ``restore`` (the item was back to the engine's own result). For a "looks right"
    (a ``*_review`` row), the decision it left standing. The log keeps every row; this names the one a curator's
    action silently superseded ("exclude · ben" where ana had swapped), for the status line and the detail."""
    me = store.query("SELECT run_id, iteration, target, task_id, step, k, pair_idx FROM overrides "
                     "WHERE override_id = ?", [int(override_id)])
    if not len(me):
        return None
    row = records(me)[0]
    target = {"pair_review": "pair", "verdict_review": "verdict"}.get(row["target"], row["target"])
    if target not in REVIEW_TARGETS:
        return None
    index, value = ("coalesce(o.pair_idx, 0)", row["pair_idx"] or 0) if target == "pair" else ("o.k", row["k"])
    found = store.query(
        f"""SELECT o.override_id, o.action, o.curator FROM overrides o
           WHERE o.run_id = $run AND o.iteration = $it AND o.target = $target AND o.task_id = $task
               AND o.step = $step AND {index} = $idx AND o.override_id < $id AND {LIVE_OVERRIDE}
           ORDER BY o.override_id DESC LIMIT 1""",
        {"run": row["run_id"], "it": int(row["iteration"]), "target": target, "task": row["task_id"],
         "step": int(row["step"]), "idx": int(value), "id": int(override_id)})
    if not len(found) or found["action"].iloc[0] == "restore":
        return None
    prior = records(found)[0]
    return {"override_id": int(prior["override_id"]), "action": str(prior["action"]), "curator": prior["curator"]}


# -- undo -----------------------------------------------------------------------------------------------------------

UNDO_SCOPES = {"pair": ("pair", "pair_review"), "verdict": ("verdict", "verdict_review")}


@_atomic
def undo_last(store: Store, run_id: str, iteration: int, curator: str, scope: str = "pair") -> dict[str, Any]:
    """Take back ``curator``'s latest live action on this iteration's pairs (``scope="pair"``: overrides and
    reviews) or verdicts (``"verdict"``): append an ``undo`` row naming it (``after_json = {"undoes": id}``), so the
    item is back to its state before that action and the log keeps both rows. Pressed again, it takes back the
    action before that one. Returns the undone row (``override_id``, ``target``, ``task_id``, ``step``, ``k``,
    ``pair_idx``, ``action``); raises ``ValueError`` when this curator has nothing left to undo here."""
    if scope not in UNDO_SCOPES:
        raise ValueError(f"scope must be pair or verdict, not {scope!r}")
    found = store.query(
        f"""SELECT override_id, target, task_id, step, k, pair_idx, action FROM overrides o
           WHERE run_id = ? AND iteration = ? AND curator = ? AND target IN (?, ?) AND {LIVE_OVERRIDE}
           ORDER BY override_id DESC LIMIT 1""", [run_id, iteration, curator, *UNDO_SCOPES[scope]])
    if not len(found):
        raise ValueError(f"{curator} has nothing to undo on the {scope}s of iteration {iteration}")
    row = records(found)[0]
    store.add_override({"run_id": run_id, "iteration": iteration, "target": row["target"], "task_id": row["task_id"],
                        "step": int(row["step"]), "k": row["k"], "pair_idx": row["pair_idx"], "action": "undo",
                        "before_json": None, "after_json": {"undoes": int(row["override_id"])}, "curator": curator,
                        "reason": f"undo of #{int(row['override_id'])} ({row['action']})"})
    return row


# -- verdicts --------------------------------------------------------------------------------------------------------


def _verdict(store: Store, run_id: str, iteration: int, task_id: str, step: int, k: int) -> dict[str, Any]:
    df = store.verdict_rows(run_id, iteration)
    df = df[(df["task_id"] == task_id) & (df["step"] == step) & (df["k"] == k)]
    if not len(df):
        raise ValueError(f"no verdict for task {task_id!r} step {step} k={k} in iteration {iteration}")
    return records(df.iloc[:1])[0]


def _verdict_state(v: dict[str, Any]) -> dict[str, Any]:
    """What the row trains on now (for before_json)."""
    return {"status": v["status"], "override": v["override_action"], "after": loads(v["override_after_json"])}


def _verdict_override(
    store: Store, v: dict[str, Any], action: str, after: dict[str, Any], curator: str, reason: str
) -> int:
    return store.add_override(
        {
            "run_id": v["run_id"],
            "iteration": int(v["iteration"]),
            "target": "verdict",
            "task_id": v["task_id"],
            "step": int(v["step"]),
            "k": int(v["k"]),
            "action": action,
            "before_json": _verdict_state(v),
            "after_json": after,
            "curator": curator,
            "reason": reason,
        }
    )


@_atomic
def keep_original(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    k: int,
    *,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Train on the grounding as the grounder wrote it."""
    v = _verdict(store, run_id, iteration, task_id, step, k)
    if v["grounding_actions"] is None:
        raise ValueError(f"no grounding stored for task {task_id!r} step {step} k={k}")
    after = {"actions": v["grounding_actions"]}
    return _verdict_override(store, v, "keep_original", after, curator, reason)


@_atomic
def accept_correction(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    k: int,
    *,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Train on the critic's correction (there must be one)."""
    v = _verdict(store, run_id, iteration, task_id, step, k)
    if not v["corrected_actions"]:
        raise ValueError(f"the critic made no correction for task {task_id!r} step {step} k={k}")
    after = {"actions": v["corrected_actions"], "subgoals": loads(v["corrected_subgoals_json"])}
    return _verdict_override(store, v, "accept_correction", after, curator, reason)


def edit_correction(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    k: int,
    actions_text: str,
    subgoals: list[str] | None = None,
    *,
    curator: str = "curator",
    reason: str = "",
) -> SavedEdit:
    """Train on curator-written actions; raises ``InvalidActionsError`` (a ValueError) when they do not parse.

    Returns a ``SavedEdit``: the execution preview (values, answer, error) for display and the id of the override row
    written. An execution error does not block the edit (the curator sees it and decides), only a parse error does.
    """
    parsed = parse_actions(actions_text)
    if not parsed.ok:
        raise InvalidActionsError(parsed.error)
    if subgoals is not None and (not isinstance(subgoals, list) or not all(isinstance(s, str) for s in subgoals)):
        raise ValueError("subgoals must be a list of strings")
    task = store.get_task(run_id, task_id)
    # Executing the edit may take a while (tools): outside the lock; only the read of the verdict and the append
    # need to be one step. An iterative step runs after the gold steps before it, as the ground stage ran it.
    result = run_grounding(task, step, actions_text, toolbox_for_run(store, run_id))
    after = {"actions": actions_text.strip(), "subgoals": subgoals, "preview": result.to_dict()}
    with store.serialized():
        v = _verdict(store, run_id, iteration, task_id, step, k)
        override_id = _verdict_override(store, v, "edit", after, curator, reason)
    return SavedEdit(result, override_id)


@_atomic
def drop_verdict(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    k: int,
    *,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """No training record from this verdict."""
    v = _verdict(store, run_id, iteration, task_id, step, k)
    return _verdict_override(store, v, "drop", {}, curator, reason)


@_atomic
def restore_verdict(
    store: Store,
    run_id: str,
    iteration: int,
    task_id: str,
    step: int,
    k: int,
    *,
    curator: str = "curator",
    reason: str = "",
) -> int:
    """Back to the critic's verdict."""
    v = _verdict(store, run_id, iteration, task_id, step, k)
    return _verdict_override(store, v, "restore", {}, curator, reason)


# -- training data ----------------------------------------------------------------------------------------------------


def _sft_record(v: dict[str, Any]) -> dict[str, Any] | None:
    """The training record one verdict row yields after its override, or None."""
    plan_subgoals = loads(v["plan_subgoals_json"]) or []
    corrected_subgoals = loads(v["corrected_subgoals_json"])
    action, after = v["override_action"], loads(v["override_after_json"]) or {}
    if action == "drop":
        return None
    if action == "keep_original":
        actions, subgoals, source = v["grounding_actions"], plan_subgoals, "override:keep_original"
    elif action == "accept_correction":
        actions, subgoals, source = v["corrected_actions"], corrected_subgoals or plan_subgoals, "override:accept"
    elif action == "edit":
        # Edited actions usually follow the corrected subgoals when the critic rewrote them.
        actions = after.get("actions")
        subgoals = after.get("subgoals") or corrected_subgoals or plan_subgoals
        source = "override:edit"
    elif v["status"] == "accepted":
        actions, subgoals, source = v["grounding_actions"], plan_subgoals, "accepted"
    elif v["status"] == "corrected":
        actions, subgoals, source = v["corrected_actions"], corrected_subgoals or plan_subgoals, "corrected"
    else:  # unfixable | unparsed | truncated | error: nothing to learn from
        return None
    if not actions or not subgoals:
        return None
    return {
        "task_id": v["task_id"],
        "step": int(v["step"]),
        "k": int(v["k"]),
        "subgoals": list(subgoals),
        "actions": actions,
        "source": source,
    }


def effective_sft_records(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """Grounder SFT records after overrides: ``{"task_id", "step", "k", "subgoals", "actions", "source"}`` where
    source is accepted | corrected | override:keep_original | override:accept | override:edit."""
    rows = store.verdict_rows(run_id, iteration)
    built = (_sft_record(row) for row in records(rows))
    return [r for r in built if r is not None]
