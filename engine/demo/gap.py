"""The demo's built-in capability gap, measured: the grounder given each plan rendering of the same tasks.

``plan_style_gap(grounder, tasks)`` scores the gold actions under each task's concrete plan (``gold_subgoals``, the
gold plan), its explicit, vague and paraphrased renderings (``meta["explicit_subgoals"]`` and the like),
and grounds each greedily: per style and per domain, the mean log-PPL of the gold actions and the accuracy (with
correct and n). ``logppl_gap`` (vague - concrete log-PPL) and ``accuracy_gap`` (concrete - vague accuracy) sum it
up: positive differences are the gap. The concrete row is "the grounder on gold plans": the ceiling a perfect
planner would give this grounder.
"""

from __future__ import annotations

import statistics
from typing import Any

from engine import generation, scoring
from engine.outcome import is_solved, run_actions
from engine.tasks import Task
from engine.turns import Agent, grounder_prompt

STYLES = {"concrete": None, "explicit": "explicit_subgoals", "vague": "vague_subgoals",
          "paraphrased": "paraphrased_subgoals"}


def _plan(task: Task, style: str) -> list[str]:
    key = STYLES[style]
    return list(task.gold_subgoals) if key is None else list(task.meta[key])


def plan_style_gap(grounder: Agent, tasks: list[Task], batch_size: int = 32,
                   max_new_tokens: int = 160) -> dict[str, Any]:
    """``{"n", "<style>_logppl", "<style>_accuracy", "by_domain": {domain: {style: {...}}}, "logppl_gap",
    "accuracy_gap"}`` over the tasks that carry every rendering."""
    tasks = [t for t in tasks if t.gold_actions and all(t.meta.get(k) for k in STYLES.values() if k)]
    out: dict[str, Any] = {"n": len(tasks), "by_domain": {}}
    if not tasks:
        return out
    for style in STYLES:
        prompts = [grounder_prompt(grounder, t, _plan(t, style)) for t in tasks]
        logppl = scoring.score_targets(grounder.model, grounder.tokenizer, prompts, [t.actions_text for t in tasks],
                                       batch_size=batch_size)
        actions = generation.generate(grounder.model, grounder.tokenizer, prompts,
                                      generation.GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0,
                                                                  batch_size=batch_size))
        correct = []
        for task, (text,) in zip(tasks, actions):
            correct.append(is_solved(task, run_actions(task, text)))
        out[f"{style}_logppl"] = statistics.fmean(logppl)
        out[f"{style}_accuracy"] = sum(correct) / len(correct)
        for domain in sorted({t.domain for t in tasks}):
            idx = [i for i, t in enumerate(tasks) if t.domain == domain]
            ok = sum(correct[i] for i in idx)
            out["by_domain"].setdefault(domain, {})[style] = {
                "n": len(idx), "correct": ok, "accuracy": ok / len(idx),
                "logppl": statistics.fmean(logppl[i] for i in idx)}
    out["logppl_gap"] = out["vague_logppl"] - out["concrete_logppl"]
    out["accuracy_gap"] = out["concrete_accuracy"] - out["vague_accuracy"]
    return out
