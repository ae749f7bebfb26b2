"""The demo's built-in capability gap, measured: the grounder given concrete vs vague plans of the same tasks.

``plan_style_gap(grounder, tasks)`` scores the gold actions under each task's concrete plan (``gold_subgoals``) and
its vague rendering (``meta["vague_subgoals"]``), and grounds both greedily: log-PPL and accuracy per style, and
the differences (vague - concrete log-PPL; concrete - vague accuracy). Positive differences are the gap.
"""

from __future__ import annotations

import statistics

from engine import models
from engine.evaluate import execute_for
from engine.metrics import score_answer
from engine.tasks import Task
from engine.turns import Agent, grounder_prompt


def plan_style_gap(grounder: Agent, tasks: list[Task], batch_size: int = 32,
                   max_new_tokens: int = 160) -> dict[str, float | int]:
    tasks = [t for t in tasks if t.meta.get("vague_subgoals") and t.gold_actions]
    out: dict[str, float | int] = {"n": len(tasks)}
    for style in ("concrete", "vague"):
        plans = [t.gold_subgoals if style == "concrete" else t.meta["vague_subgoals"] for t in tasks]
        prompts = [grounder_prompt(grounder, t, p) for t, p in zip(tasks, plans)]
        logppl = models.score_targets(grounder.model, grounder.tokenizer, prompts, [t.actions_text for t in tasks],
                                      batch_size=batch_size)
        actions = models.generate(grounder.model, grounder.tokenizer, prompts,
                                  models.GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0,
                                                          batch_size=batch_size))
        correct = []
        for task, (text,) in zip(tasks, actions):
            result = execute_for(task, text)
            correct.append(result.ok and bool(score_answer(task.domain, result.answer or "", task.answer)["correct"]))
        out[f"{style}_logppl"] = statistics.fmean(logppl)
        out[f"{style}_accuracy"] = sum(correct) / len(correct)
    out["logppl_gap"] = out["vague_logppl"] - out["concrete_logppl"]
    out["accuracy_gap"] = out["concrete_accuracy"] - out["vague_accuracy"]
    return out
