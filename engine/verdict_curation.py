"""Curator overrides of critic verdicts, and the grounder SFT records they produce (``effective_sft_records``).

One of the three curation modules: the override log's rules (append-only rows, the latest per target wins, a latest
``restore`` is back to what the engine decided, ``before_json`` / ``after_json`` for the audit, each action one
serialized step) are ``engine.curation``'s, which holds the pair overrides; "looks right" reviews and undo are
``engine.review_trail``'s. Contract (shared by the studio and the CLI):

* Verdict overrides (``target="verdict"``) are keyed by ``(run_id, iteration, task_id, step, k)``: ``keep_original``
  (train on the grounding as it was), ``accept_correction`` (train on the critic's correction), ``edit`` (train on
  curator-written actions, validated with ``parse_actions`` and previewed with the executor), ``drop`` (no
  training record), ``restore``. The verdict actions return the id of the override row they append
  (``edit_correction``: a ``SavedEdit``, that id with the execution preview of the edited actions).
* ``effective_sft_records`` gives the grounder's training data after overrides. A curator's decision (keep original,
  accept correction, edit) pairs its actions with the subgoals the grounder was shown (a malformed plan's raw text,
  as the ground stage showed it) when neither the edit nor the critic gives others; a critic's own verdict without a
  decision keeps the plan's parsed subgoals (none: no record).
* ``engine.agreement.agreement`` (its own module) measures how often curators agreed with the critic, over the
  verdicts with a live decision or a "looks right" review (a review leaves the critic's verdict standing: it agrees
  with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.actions import parse_actions
from engine.curation import atomic
from engine.dbutil import loads, records
from engine.executor import ExecutionResult
from engine.outcome import run_grounding, toolbox_for_run
from engine.store import Store
from engine.turns import plan_subgoals as shown_subgoals

VERDICT_ACTIONS = ("keep_original", "accept_correction", "edit", "drop", "restore")
# Critic statuses that yield a training record without any override.
TRAINABLE_STATUSES = ("accepted", "corrected")


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


# -- verdicts --------------------------------------------------------------------------------------------------------


def require_verdict(store: Store, run_id: str, iteration: int, task_id: str, step: int, k: int) -> dict[str, Any]:
    """The verdict's row (``Store.verdict_rows``: with its latest override); ``ValueError`` when there is none."""
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


@atomic
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
    v = require_verdict(store, run_id, iteration, task_id, step, k)
    if v["grounding_actions"] is None:
        raise ValueError(f"no grounding stored for task {task_id!r} step {step} k={k}")
    after = {"actions": v["grounding_actions"]}
    return _verdict_override(store, v, "keep_original", after, curator, reason)


@atomic
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
    v = require_verdict(store, run_id, iteration, task_id, step, k)
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
        v = require_verdict(store, run_id, iteration, task_id, step, k)
        override_id = _verdict_override(store, v, "edit", after, curator, reason)
    return SavedEdit(result, override_id)


@atomic
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
    v = require_verdict(store, run_id, iteration, task_id, step, k)
    return _verdict_override(store, v, "drop", {}, curator, reason)


@atomic
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
    v = require_verdict(store, run_id, iteration, task_id, step, k)
    return _verdict_override(store, v, "restore", {}, curator, reason)


# -- training data ----------------------------------------------------------------------------------------------------


def _sft_record(v: dict[str, Any]) -> dict[str, Any] | None:
    """The training record one verdict row yields after its override, or None."""
    plan_subgoals = loads(v["plan_subgoals_json"]) or []
    corrected_subgoals = loads(v["corrected_subgoals_json"])
    # A curator's decision trains on the subgoals the grounder was shown when it grounded the plan (the ground
    # stage's rule, ``engine.turns.plan_subgoals``): a malformed plan parses to no subgoals and was grounded under its
    # raw text, and its "Accept original" or saved edit gave no record at all, silently (the studio said "recorded").
    shown = plan_subgoals if v.get("plan_text") is None else shown_subgoals(plan_subgoals, v["plan_text"])
    action, after = v["override_action"], loads(v["override_after_json"]) or {}
    if action == "drop":
        return None
    if action == "keep_original":
        actions, subgoals, source = v["grounding_actions"], shown, "override:keep_original"
    elif action == "accept_correction":
        actions, subgoals, source = v["corrected_actions"], corrected_subgoals or shown, "override:accept"
    elif action == "edit":
        # Edited actions usually follow the corrected subgoals when the critic rewrote them.
        actions = after.get("actions")
        subgoals = after.get("subgoals") or corrected_subgoals or shown
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

