"""What a task's actions produce and whether the answer is right: the one home for both rules.

Every place that runs a grounding and judges it (the ground stage, the evaluation, the curation edit and the
critic tab's edit preview) calls these, so they cannot disagree:

* ``tool_env(task, qa_model)``: the task's tools: its context passages as the corpus and the run's QA model.
* ``run_actions(task, actions, qa_model)``: execute an action text with those tools.
* ``judge_answer(task, answer)``: the task's metric (``engine.metrics.score_answer`` with the task's *source*, so a
  HotpotQA yes/no gold is judged by EM everywhere, a StrategyQA one by yes/no accuracy).
* ``qa_model_for(tools)`` / ``qa_model_for_run(store, run_id)``: the OpenAI-compatible QA model a config names, or
  None for the extractive fallback.
* ``step_result`` / ``gold_step_results`` / ``step_matches``: what the iterative planner is told after each
  subgoal, and whether a grounded step reached the gold step's result.

Pure functions of their inputs (the QA model aside, which is a remote call); no stage or UI imports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from engine.config import ToolsSection, config_from_dict
from engine.executor import ExecutionResult, ToolEnv, execute
from engine.metrics import maths_correct, score_answer
from engine.tasks import Task
from engine.tools.qa import Corpus

if TYPE_CHECKING:
    from engine.store import Store


def tool_env(task: Task, qa_model: Any = None) -> ToolEnv:
    """The task's tools: its context passages as the corpus, and the QA model when one is configured."""
    return ToolEnv(corpus=Corpus.from_context(task.context) if task.context else None, qa_model=qa_model)


def run_actions(task: Task, actions: str, qa_model: Any = None) -> ExecutionResult:
    """Execute ``actions`` (one text, ``R1 = ...; R2 = ...``) with the task's tools."""
    return execute(actions, task.domain, tool_env(task, qa_model))


def judge_answer(task: Task, answer: str | None) -> dict[str, Any]:
    """The task's metric for ``answer``: ``{"correct": bool, ...}`` (em/f1 for QA, episode scores for web)."""
    return score_answer(task.domain, answer or "", task.answer, task.source)


def is_solved(task: Task, result: ExecutionResult) -> bool:
    """Did an execution run cleanly and reach the right final answer?"""
    return result.ok and bool(judge_answer(task, result.answer)["correct"])


def step_matches(task: Task, got: str, want: str) -> bool:
    """Does one iterative step's result equal the gold step's? (maths: numerically; otherwise case-blind text)"""
    return maths_correct(got, want) if task.domain == "maths" else got.strip().lower() == want.strip().lower()


def qa_model_for(tools: ToolsSection) -> Any:
    """The OpenAI-compatible model behind the QA tool, or None for the extractive fallback."""
    if not tools.qa_model:
        return None
    from engine.tools.qa import OpenAIQA

    return OpenAIQA(tools.qa_model, base_url=tools.qa_base_url,
                    api_key=os.environ.get(tools.qa_api_key_env) or "EMPTY")


def qa_model_for_run(store: Store, run_id: str) -> Any:
    """The QA model of a stored run's config (None when it names none, or the run is unknown)."""
    run = store.get_run(run_id)
    # Only the tools section is read, so a run stored by an older version with other fields still previews.
    return qa_model_for(config_from_dict({"tools": run["config"].get("tools", {})}).tools) if run else None


def step_result(result: ExecutionResult, group: str) -> str:
    """What the planner is told after a subgoal: the value of its last action (or the error)."""
    if not result.ok:
        return f"error: {result.error}"
    step_values = [v for s in result.steps if str(s.action) in group for v in s.values.values()]
    return step_values[-1] if step_values else (result.answer or "")


def gold_step_results(task: Task) -> list[str]:
    """The executed result of each gold subgoal (the feedback the iterative planner was trained with)."""
    results = []
    for k in range(1, len(task.gold_actions) + 1):
        result = run_actions(task, "; ".join(task.gold_actions[:k]))
        results.append(step_result(result, task.gold_actions[k - 1]))
    return results
