"""The reference critic: offline, deterministic, guided by gold annotations (the demo's default).

Accept a grounding that executed to the gold answer; otherwise correct it to the gold subgoals and actions when
the task has them (for an iterative step: the gold subgoal and actions of that step), else ``unfixable``. Every
verdict says it is reference-guided.
"""

from __future__ import annotations

from engine.critics.base import Grounding, Verdict


class ReferenceCritic:
    name = "reference"

    def judge(self, items: list[Grounding]) -> list[Verdict]:
        return [self._one(item) for item in items]

    def _one(self, item: Grounding) -> Verdict:
        task = item.task
        if item.correct:
            return Verdict("accepted", self.name, reference_guided=True,
                           raw="Final answer reached (the actions execute to the gold answer).")
        error = item.execution.get("error")
        why = f"execution failed: {error}" if error else f"answer {item.execution.get('answer')!r} != gold"
        if not task.gold_actions or not task.gold_subgoals:
            return Verdict("unfixable", self.name, reference_guided=True, raw=f"{why}; no gold annotation to use")
        if item.step == 0:
            subgoals, actions = list(task.gold_subgoals), task.actions_text
        else:
            subgoals, actions = [task.gold_subgoals[item.step - 1]], task.gold_actions[item.step - 1]
        return Verdict("corrected", self.name, reference_guided=True, raw=f"{why}; corrected to the gold annotation",
                       corrected_subgoals=subgoals, corrected_actions=actions)
