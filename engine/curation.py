"""Curator overrides of DPO pairs (``effective_pairs`` and the pair actions), and the rules every curator action
follows.

Curation is three modules: this one (pair overrides, plus the override-log rules below and ``atomic``, which the
others share), ``engine.verdict_curation`` (verdict overrides and the grounder SFT records they produce) and
``engine.review_trail`` ("looks right" reviews, the "reviewed N of M" counters, the decision an override replaced,
undo). How often curators agreed with the critic is ``engine.agreement``'s. Contract (shared by the studio and the
CLI):

* Overrides are append-only rows in ``overrides``; the latest row per target wins and a latest ``restore`` row
  means "back to what the engine decided". Every row records ``curator``, ``reason`` and ``before_json`` /
  ``after_json`` (the effective state before and after) so the history is auditable.
* Each action reads the current state and appends its row under ``Store.serialized()`` (``atomic``): concurrent
  sessions acting on one item are applied one after the other, each seeing the previous one's override (swapping a
  pair twice at once still ends where it started, and ``before_json`` chains without gaps).
* Pair overrides (``target="pair"``) are keyed by ``(run_id, iteration, task_id, step, pair_idx)``; ``pair_idx``
  (0 unless a multi-pair rule made several pairs for one task-step) is the overrides table's own column (also kept
  in ``after_json`` as part of the state it describes). Actions:
  ``swap`` flips the auto pair's chosen/rejected (and logppls); swapping a swapped pair writes a ``restore``;
  swapping a chosen pair writes a ``choose`` with the two plans reversed. ``exclude`` and ``tie`` keep the row,
  flagged, but take it out of training/export. ``choose`` names any two scored, differing plans of the task-step
  (``after_json["chosen_k"/"rejected_k"]``; logppls come from ``scores``) and may create a pair the rule did not.
  The auto ``pairs`` rows may be deleted and rebuilt by the pairs stage: overrides refer to the key, not the row,
  so they apply to the rebuilt pair (an override of a pair the rule no longer makes is ignored, except ``choose``).
  The pair actions return the id of the override row they append.
* ``effective_pairs`` gives the pairs after overrides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd

from engine.store import Store

PAIR_ACTIONS = ("swap", "exclude", "tie", "choose", "restore")

F = TypeVar("F", bound=Callable[..., Any])


def atomic(fn: F) -> F:
    """Run a curator action (``fn(store, ...)``) under ``store.serialized()``: its read of the current state and its
    append form one step, so no other session's override lands in between."""

    @functools.wraps(fn)
    def wrapper(store: Store, *args: Any, **kwargs: Any) -> Any:
        with store.serialized():
            return fn(store, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


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


def require_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int, pair_idx: int) -> dict:
    """The pair's current state (``chosen_k``, ``rejected_k``, its ``action``); ``ValueError`` when it has none."""
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


@atomic
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
    before = require_pair(store, run_id, iteration, task_id, step, pair_idx)
    after = {"pair_idx": pair_idx, "chosen_k": before["rejected_k"], "rejected_k": before["chosen_k"]}
    if before["action"] == "swap":
        action = "restore"
    elif before["action"] == "choose":
        action = "choose"  # a flipped choice is still a choice: its ks do not come from the auto pair
    else:
        action = "swap"
    return _pair_override(store, run_id, iteration, task_id, step, action, before, after, curator, reason)


@atomic
def _flag_pair(store: Store, run_id: str, iteration: int, task_id: str, step: int, action: str, pair_idx: int,
               curator: str, reason: str) -> int:
    """Keep the pair's plans as they are and flag it (``exclude`` or ``tie``): out of training and export."""
    before = require_pair(store, run_id, iteration, task_id, step, pair_idx)
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


@atomic
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


@atomic
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

