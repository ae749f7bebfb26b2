"""The review trail of curation, over pairs (``engine.curation``) and verdicts (``engine.verdict_curation``) alike:
"looks right" reviews, the "reviewed N of M" counters, the decision an override replaced, and undo.

Its rows go to the same append-only override log, by ``engine.curation``'s rules (``mark_reviewed`` and
``undo_last`` read and append as one serialized step). Contract (shared by the studio and the CLI):

* ``mark_reviewed`` records that a curator looked at a pair or verdict and left it as it is (a row with target
  ``pair_review`` / ``verdict_review``: never part of the effective data); ``review_progress`` counts the items
  anybody (and one curator) has acted on or reviewed, for the "reviewed N of M" counters; ``looked_right`` names,
  per item, the curator whose "looks right" is its latest live row (the trace a review leaves on the page).
* ``replaced_decision`` names the live decision (action, curator, id) an override took the place of (a later
  curator's decision wins silently otherwise: the log keeps both, the page showed only the latest).
* ``undo_last`` takes back a curator's latest action (pairs or verdicts) by appending an ``undo`` row that names
  it; undone rows and undo rows never count as an override or a review (``engine.views.LIVE_OVERRIDE``). It refuses
  (``UndoRefused``) when another curator has acted on the same item since (their decision or "looks right" was made
  on the state this undo would take away), and when the caller's ``guard`` refuses the item (the studio: another
  curator has it open); nothing is appended then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.curation import atomic, require_pair
from engine.dbutil import records
from engine.store import Store
from engine.verdict_curation import require_verdict
from engine.views import LIVE_OVERRIDE

# -- reviews --------------------------------------------------------------------------------------------------------

REVIEW_TARGETS = {"pair": "pair_review", "verdict": "verdict_review"}


class NothingToUndo(ValueError):
    """``undo_last`` found no live action of the curator to take back: not a mistake (the studio says it as an info
    toast, not an error); a ``ValueError`` so callers that catch those still do."""


class UndoRefused(ValueError):
    """``undo_last`` would change an item under another curator: one acted on it after the action to undo (a "looks
    right" would then stand for a state its curator never saw, a decision would no longer be the one they replaced).
    Nothing is undone; the curator decides again on the item instead."""


@atomic
def mark_reviewed(store: Store, run_id: str, iteration: int, target: str, task_id: str, step: int, index: int, *,
                  curator: str = "curator", reason: str = "") -> int:
    """Record "looked at, left as it is" for a pair (``index`` = pair_idx) or a verdict (``index`` = k)."""
    if target not in REVIEW_TARGETS:
        raise ValueError(f"target must be pair or verdict, not {target!r}")
    if target == "pair":
        require_pair(store, run_id, iteration, task_id, step, index)
    else:
        require_verdict(store, run_id, iteration, task_id, step, index)
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


def _acted_since(store: Store, row: dict[str, Any], curator: str) -> dict[str, Any] | None:
    """Another curator's latest live row (decision or review) on ``row``'s item after ``row``, else None."""
    scope = "pair" if row["target"] in UNDO_SCOPES["pair"] else "verdict"
    item, value = ("coalesce(o.pair_idx, 0)", row["pair_idx"] or 0) if scope == "pair" else ("o.k", row["k"])
    found = store.query(
        f"""SELECT o.action, o.curator FROM overrides o
           WHERE o.run_id = $run AND o.iteration = $it AND o.target IN ($t1, $t2) AND o.task_id = $task
               AND o.step = $step AND {item} = $idx AND o.override_id > $id AND o.curator <> $me AND {LIVE_OVERRIDE}
           ORDER BY o.override_id DESC LIMIT 1""",
        {"run": row["run_id"], "it": int(row["iteration"]), "t1": UNDO_SCOPES[scope][0], "t2": UNDO_SCOPES[scope][1],
         "task": row["task_id"], "step": int(row["step"]), "idx": int(value), "id": int(row["override_id"]),
         "me": curator})
    return records(found)[0] if len(found) else None


@atomic
def undo_last(store: Store, run_id: str, iteration: int, curator: str, scope: str = "pair",
              guard: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Take back ``curator``'s latest live action on this iteration's pairs (``scope="pair"``: overrides and
    reviews) or verdicts (``"verdict"``): append an ``undo`` row naming it (``after_json = {"undoes": id}``), so the
    item is back to its state before that action and the log keeps both rows. Pressed again, it takes back the
    action before that one. Returns the undone row (``override_id``, ``run_id``, ``iteration``, ``target``,
    ``task_id``, ``step``, ``k``, ``pair_idx``, ``action``); raises ``NothingToUndo`` (a ``ValueError``) when this
    curator has nothing left to undo here, and ``UndoRefused`` when another curator has acted on that item since.
    ``guard(row)``, called under the same lock before anything is written, may refuse too by raising (the studio:
    the item is open by another curator right now)."""
    if scope not in UNDO_SCOPES:
        raise ValueError(f"scope must be pair or verdict, not {scope!r}")
    found = store.query(
        f"""SELECT override_id, run_id, iteration, target, task_id, step, k, pair_idx, action FROM overrides o
           WHERE run_id = ? AND iteration = ? AND curator = ? AND target IN (?, ?) AND {LIVE_OVERRIDE}
           ORDER BY override_id DESC LIMIT 1""", [run_id, iteration, curator, *UNDO_SCOPES[scope]])
    if not len(found):
        raise NothingToUndo(f"{curator} has nothing to undo on the {scope}s of iteration {iteration}")
    row = records(found)[0]
    since = _acted_since(store, row, curator)
    if since is not None:
        what = "pair" if scope == "pair" else "verdict"
        raise UndoRefused(
            f"Not undone: {since['curator']} has acted on the {what} of your {_words(row['action'])} since "
            f"({_words(since['action'])}), so undoing it would change the {what} under their decision. Open it and "
            f"decide again instead (Restore puts it back to the engine's own {what}).")
    if guard is not None:
        guard(row)
    store.add_override({"run_id": run_id, "iteration": iteration, "target": row["target"], "task_id": row["task_id"],
                        "step": int(row["step"]), "k": row["k"], "pair_idx": row["pair_idx"], "action": "undo",
                        "before_json": None, "after_json": {"undoes": int(row["override_id"])}, "curator": curator,
                        "reason": f"undo of #{int(row['override_id'])} ({row['action']})"})
    return row


def _words(action: str) -> str:
    """A stored action as a curator reads it ("keep_original" -> "accept original", "reviewed" -> "looks right")."""
    return {"reviewed": "looks right", "keep_original": "accept original"}.get(action, action.replace("_", " "))
