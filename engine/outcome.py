"""What a task's actions produce and whether the answer is right: the one home for both rules.

Every place that runs a grounding and judges it (the ground stage, the evaluation, the curation edit and the
critic tab's edit preview) calls these, so they cannot disagree:

* ``Toolbox`` / ``toolbox_for(tools)`` / ``toolbox_for_run(store, run_id)``: what a run's tools share across tasks:
  the QA model (OpenAI-compatible, or None for the extractive fallback) and the passage corpus ``tools.corpus``
  names (loaded once per file version), for tasks that bring no context of their own.
* ``tool_env(task, toolbox)``: the task's tools: its context passages as the corpus (else the toolbox's corpus) and
  the run's QA model.
* ``run_actions(task, actions, toolbox)``: execute an action text with those tools.
* ``judge_answer(task, answer)``: the task's metric (``engine.metrics.score_answer`` with the task's *source*, so a
  HotpotQA yes/no gold is judged by EM everywhere, a StrategyQA one by yes/no accuracy).
* ``step_result`` / ``gold_step_results`` / ``step_matches``: what the iterative planner is told after each
  subgoal, and whether a grounded step reached the gold step's result.

Pure functions of their inputs (the QA model aside, which is a remote call); no stage or UI imports.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import ToolsSection, config_from_dict
from engine.executor import ExecutionResult, ToolEnv, execute
from engine.metrics import maths_correct, score_answer
from engine.tasks import Task
from engine.tools.qa import Corpus

if TYPE_CHECKING:
    from engine.store import Store


@dataclass(frozen=True)
class Toolbox:
    """What a run's tools share across its tasks (the default, empty, is offline: extractive QA, no corpus)."""

    qa_model: Any = None  # .answer(context, question), or None for the extractive fallback
    corpus: Corpus | None = None  # passages for tasks without context of their own (tools.corpus)


def tool_env(task: Task, toolbox: Toolbox | None = None) -> ToolEnv:
    """The task's tools: its context passages as the corpus (else the run's corpus), and the run's QA model."""
    toolbox = toolbox or Toolbox()
    corpus = Corpus.from_context(task.context) if task.context else toolbox.corpus
    return ToolEnv(corpus=corpus, qa_model=toolbox.qa_model)


def run_actions(task: Task, actions: str, toolbox: Toolbox | None = None) -> ExecutionResult:
    """Execute ``actions`` (one text, ``R1 = ...; R2 = ...``) with the task's tools."""
    return execute(actions, task.domain, tool_env(task, toolbox))


def run_grounding(task: Task, step: int, actions: str, toolbox: Toolbox | None = None) -> ExecutionResult:
    """Execute one grounding as the ground stage judges it: a onetime plan's actions (``step`` 0) alone; an iterative
    step's after the gold actions of the steps before it, which define the ``R1`` .. ``R{s-1}`` it reads."""
    if step == 0:
        return run_actions(task, actions, toolbox)
    return run_actions(task, "; ".join([*task.gold_actions[:step - 1], actions]), toolbox)


def judge_answer(task: Task, answer: str | None) -> dict[str, Any]:
    """The task's metric for ``answer``: ``{"correct": bool, ...}`` (em/f1 for QA, episode scores for web)."""
    return score_answer(task.domain, answer or "", task.answer, task.source)


def is_solved(task: Task, result: ExecutionResult) -> bool:
    """Did an execution run cleanly and reach the right final answer?"""
    return result.ok and bool(judge_answer(task, result.answer)["correct"])


def step_matches(task: Task, got: str, want: str) -> bool:
    """Does one iterative step's result equal the gold step's? (maths: numerically; otherwise case-blind text)"""
    return maths_correct(got, want) if task.domain == "maths" else got.strip().lower() == want.strip().lower()


def toolbox_for(tools: ToolsSection) -> Toolbox:
    """The QA model and corpus a config's ``[tools]`` names."""
    qa_model = None
    if tools.qa_model:
        from engine.tools.qa import OpenAIQA

        qa_model = OpenAIQA(tools.qa_model, base_url=tools.qa_base_url,
                            api_key=os.environ.get(tools.qa_api_key_env) or "EMPTY")
    return Toolbox(qa_model=qa_model, corpus=shared_corpus(tools.corpus) if tools.corpus else None)


def shared_corpus(path: str) -> Corpus:
    """``tools.corpus`` loaded (and its BM25 index built) once per file version in this process."""
    resolved = Path(path).resolve()
    stat = resolved.stat()  # a missing file raises here, naming it
    return _load_corpus(str(resolved), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_corpus(path: str, mtime_ns: int, size: int) -> Corpus:
    return Corpus.from_jsonl(path)


def toolbox_for_run(store: Store, run_id: str) -> Toolbox:
    """The toolbox of a stored run's config (empty when the run is unknown)."""
    run = store.get_run(run_id)
    # Only the tools section is read, so a run stored by an older version with other fields still previews.
    return toolbox_for(config_from_dict({"tools": run["config"].get("tools", {})}).tools) if run else Toolbox()


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
