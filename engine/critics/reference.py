"""The reference critic: offline, deterministic, guided by gold annotations (the demo's default).

It judges the grounder's actions *for the plan the planner sampled*, as the paper's critic does:

* actions that execute to the gold answer (iterative: the gold step result) are accepted ("Final answer reached");
* otherwise, when the sampled plan itself is sound, only the actions are corrected (to the gold actions) and the
  planner's plan is kept -- so stage 2 teaches the grounder to execute the plans its planner really writes;
* when the plan is wrong, the subgoals are corrected too ("Corrected Subgoals" and "Corrected Actions");
* a task without gold annotations is ``unfixable``.

A plan is *sound* when it has one subgoal per gold step and, where the task lists the acceptable renderings of
each step (``meta["step_renderings"]``: the demo world's concrete, explicit, paraphrased and vague wordings), each
subgoal is one of its step's renderings. Without renderings only the step count can be checked: an approximation,
stated here because a plan with the right length but a wrong step passes it.

``error_rate`` > 0 makes a *weaker* critic for the paper's critic-strength study: that share of items (chosen by a
hash of the seed and the item, so reruns agree) gets the wrong verdict -- a wrong grounding accepted, or a right one
"corrected" into actions with one number changed. Such verdicts say so in ``extra["injected_error"]``. Every
verdict is marked reference-guided.
"""

from __future__ import annotations

import hashlib
import re

from engine.critics.base import Grounding, Verdict
from engine.tasks import Task


def plan_is_sound(task: Task, step: int, subgoals: list[str]) -> bool:
    """Does the sampled plan (or, iterative, the sampled subgoal of ``step``) fit the gold steps?"""
    renderings = task.meta.get("step_renderings") if isinstance(task.meta, dict) else None
    wanted = range(len(task.gold_subgoals)) if step == 0 else [step - 1]
    if len(subgoals) != len(wanted):
        return False
    if not renderings:
        return all(s.strip() for s in subgoals)
    norm = [_norm(s) for s in subgoals]
    return all(n in {_norm(r) for r in renderings[i]} for n, i in zip(norm, wanted))


def _norm(text: str) -> str:
    return " ".join(text.split()).strip().rstrip(".").lower()


def _unit(seed: int, item: Grounding) -> float:
    """A number in [0, 1) fixed by the seed and the item (not by Python's salted hash)."""
    key = f"{seed}|{item.task.id}|{item.step}|{item.k}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64


def _wrong_actions(actions: str) -> str:
    """Gold actions made wrong the way a careless critic would: the first integer literal off by one (else the
    first two actions swapped)."""
    match = re.search(r"(?<![R\w])(\d+)(?!\w)", actions)
    if match:
        return actions[:match.start()] + str(int(match.group(1)) + 1) + actions[match.end():]
    parts = [p.strip() for p in actions.split(";")]
    if len(parts) >= 2:
        parts[0], parts[1] = parts[1], parts[0]
    return "; ".join(parts)


class ReferenceCritic:
    name = "reference"

    def __init__(self, error_rate: float = 0.0, seed: int = 0):
        self.error_rate, self.seed = error_rate, seed

    def judge(self, items: list[Grounding]) -> list[Verdict]:
        return [self._one(item) for item in items]

    def _one(self, item: Grounding) -> Verdict:
        verdict = self._honest(item)
        decided = verdict.status in ("accepted", "corrected")
        if self.error_rate and decided and _unit(self.seed, item) < self.error_rate:
            return self._mistaken(item)
        return verdict

    def _gold(self, item: Grounding) -> tuple[list[str], str]:
        task = item.task
        if item.step == 0:
            return list(task.gold_subgoals), task.actions_text
        return [task.gold_subgoals[item.step - 1]], task.gold_actions[item.step - 1]

    def _honest(self, item: Grounding) -> Verdict:
        task = item.task
        if item.correct:
            return Verdict("accepted", self.name, reference_guided=True,
                           raw="Final answer reached (the actions execute to the gold answer).")
        # (``Grounding`` makes a missing error or answer None, never NaN: "execution failed: nan" was once shown)
        error, answer = item.execution.get("error"), item.execution.get("answer")
        if error:
            why = f"execution failed: {error}"
        else:
            why = "no answer from the actions" if answer is None else f"answer {answer!r} != gold"
        if not task.gold_actions or not task.gold_subgoals:
            return Verdict("unfixable", self.name, reference_guided=True, raw=f"{why}; no gold annotation to use")
        subgoals, actions = self._gold(item)
        if plan_is_sound(task, item.step, item.subgoals):
            return Verdict("corrected", self.name, reference_guided=True,
                           raw=f"{why}; the plan is sound: actions corrected to the gold actions for it",
                           corrected_subgoals=None, corrected_actions=actions)
        return Verdict("corrected", self.name, reference_guided=True,
                       raw=f"{why}; the plan does not fit the gold steps: subgoals and actions corrected",
                       corrected_subgoals=subgoals, corrected_actions=actions)

    def _mistaken(self, item: Grounding) -> Verdict:
        extra = {"injected_error": True, "error_rate": self.error_rate}
        if not item.correct:
            return Verdict("accepted", self.name, reference_guided=True, extra=extra,
                           raw="Final answer reached (an injected critic error: the actions are wrong).")
        _, gold_actions = self._gold(item)
        return Verdict("corrected", self.name, reference_guided=True, extra=extra,
                       raw="An injected critic error: correct actions 'corrected' into wrong ones.",
                       corrected_subgoals=None, corrected_actions=_wrong_actions(gold_actions))
