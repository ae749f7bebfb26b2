"""End-to-end evaluation: plan -> ground -> execute -> answer -> metric, batched, with per-task traces.

``run_onetime(planner, grounder, tasks, settings)`` and ``run_iterative(...)`` (the planner and grounder taking turns
per subgoal) return one ``Trace`` per task (plan text, subgoals, actions,
execution values, answer, correctness). ``evaluate(...)`` adds the metrics per split and domain and the
*capability gap*: the grounder's mean log-perplexity of the gold actions given the planner's own greedy plan (the
paper's Table 4 quantity; lower means the two agents fit each other better). The loop's ``evaluate`` stage and
``python -m engine eval`` both call ``evaluate``. ``ground_plans`` runs the grounder alone on given plans (the swap
table's "grounder on gold plans").
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from engine import generation, prompts, scoring
from engine.config import EvaluateSection
from engine.formats.lumos import parse_planner_turn
from engine.outcome import Toolbox, judge_answer, run_actions, step_result
from engine.stats import wilson
from engine.tasks import Task
from engine.turns import (
    Agent,
    grounder_prompt,
    grounder_prompt_iterative,
    planner_prompt,
    planner_prompt_iterative,
    read_plan,
)


@dataclass
class Trace:
    task_id: str
    split: str
    domain: str
    plan: str  # raw planner text (iterative: the subgoals joined in onetime form)
    subgoals: list[str]
    actions: str
    ok: bool
    values: dict[str, str]
    answer: str | None
    gold: str
    correct: bool
    error: str | None = None
    scores: dict[str, Any] = field(default_factory=dict)  # em / f1 for qa
    gold_logppl: float | None = None  # grounder log-PPL of the gold actions given this plan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _trace(task: Task, plan: str, subgoals: list[str], actions: str, toolbox: Toolbox | None = None) -> Trace:
    result = run_actions(task, actions, toolbox)
    scores = judge_answer(task, result.answer)  # None when a step failed: scored as no answer
    return Trace(task.id, task.split, task.domain, plan, subgoals, actions, result.ok, result.values, result.answer,
                 task.answer, bool(scores.get("correct")), result.error,
                 {k: v for k, v in scores.items() if k in ("em", "f1")})


def _greedy(tokens: int, batch: int) -> generation.GenerationConfig:
    return generation.GenerationConfig(max_new_tokens=tokens, temperature=0.0, batch_size=batch)


def run_onetime(planner: Agent, grounder: Agent, tasks: list[Task], settings: EvaluateSection,
                toolbox: Toolbox | None = None) -> list[Trace]:
    plans = generation.generate(planner.model, planner.tokenizer, [planner_prompt(planner, t) for t in tasks],
                                _greedy(settings.plan_max_new_tokens, settings.batch_size))
    texts = [p[0] for p in plans]
    return _ground_onetime(grounder, tasks, [read_plan(text)[0] for text in texts], texts, settings, toolbox)


def _ground_onetime(grounder: Agent, tasks: list[Task], subgoals: list[list[str]], texts: list[str],
                    settings: EvaluateSection, toolbox: Toolbox | None = None) -> list[Trace]:
    g_prompts = [grounder_prompt(grounder, t, s) for t, s in zip(tasks, subgoals)]
    actions = generation.generate(grounder.model, grounder.tokenizer, g_prompts,
                                  _greedy(settings.ground_max_new_tokens, settings.batch_size))
    return [_trace(t, text, s, a[0], toolbox) for t, text, s, a in zip(tasks, texts, subgoals, actions)]


def run_iterative(planner: Agent, grounder: Agent, tasks: list[Task], settings: EvaluateSection,
                  max_steps: int = 8, toolbox: Toolbox | None = None) -> list[Trace]:
    """Turn by turn: the planner proposes subgoal k, the grounder grounds it, the executor's result goes back."""
    subgoals: list[list[str]] = [[] for _ in tasks]
    actions: list[list[str]] = [[] for _ in tasks]
    results: list[list[str]] = [[] for _ in tasks]
    active = list(range(len(tasks)))
    for _ in range(max_steps):
        if not active:
            break
        p_prompts = [planner_prompt_iterative(planner, tasks[i], subgoals[i], results[i]) for i in active]
        turns = generation.generate(planner.model, planner.tokenizer, p_prompts,
                                    _greedy(settings.plan_max_new_tokens, settings.batch_size))
        grounding = []
        for i, turn in zip(active, turns):
            try:
                parsed = parse_planner_turn(turn[0].strip())
            except ValueError:
                parsed = None  # a malformed turn ends planning, as a stop would
            if parsed is not None:
                subgoals[i].append(parsed[1].strip())
                grounding.append(i)
        if not grounding:
            break
        g_prompts = [grounder_prompt_iterative(grounder, tasks[i], subgoals[i], actions[i], results[i])
                     for i in grounding]
        groups = generation.generate(grounder.model, grounder.tokenizer, g_prompts,
                                     _greedy(settings.ground_max_new_tokens, settings.batch_size))
        for i, group in zip(grounding, groups):
            actions[i].append(group[0].strip())
            result = run_actions(tasks[i], "; ".join(actions[i]), toolbox)
            results[i].append(step_result(result, group[0]))
        active = grounding
    return [_trace(t, prompts.format_subgoals(s), s, "; ".join(a), toolbox)
            for t, s, a in zip(tasks, subgoals, actions)]


def ground_plans(grounder: Agent, tasks: list[Task], plans: list[list[str]], settings: EvaluateSection,
                 toolbox: Toolbox | None = None) -> list[Trace]:
    """The grounder alone on given plans (e.g. each task's gold subgoals), greedy, as ``run_onetime`` and
    ``run_iterative`` ground: onetime grounds each whole plan in one turn; iterative grounds subgoal k after its own
    actions for subgoals 1..k-1 and their executed results."""
    texts = [prompts.format_subgoals(p) for p in plans]
    if settings.formulation != "iterative":
        return _ground_onetime(grounder, tasks, plans, texts, settings, toolbox)
    actions: list[list[str]] = [[] for _ in tasks]
    results: list[list[str]] = [[] for _ in tasks]
    for k in range(max((len(p) for p in plans), default=0)):
        active = [i for i, p in enumerate(plans) if len(p) > k]
        g_prompts = [grounder_prompt_iterative(grounder, tasks[i], plans[i], actions[i], results[i]) for i in active]
        groups = generation.generate(grounder.model, grounder.tokenizer, g_prompts,
                                     _greedy(settings.ground_max_new_tokens, settings.batch_size))
        for i, group in zip(active, groups):
            actions[i].append(group[0].strip())
            result = run_actions(tasks[i], "; ".join(actions[i]), toolbox)
            results[i].append(step_result(result, group[0]))
    return [_trace(t, text, p, "; ".join(a), toolbox) for t, text, p, a in zip(tasks, texts, plans, actions)]


def gold_logppl(grounder: Agent, tasks: list[Task], plans: list[list[str]], batch_size: int = 32) -> list[float]:
    """Grounder mean NLL of each task's gold actions given ``plans`` (tasks without gold actions: NaN)."""
    keep = [i for i, t in enumerate(tasks) if t.gold_actions]
    out = [float("nan")] * len(tasks)
    values = scoring.score_targets(grounder.model, grounder.tokenizer,
                                   [grounder_prompt(grounder, tasks[i], plans[i]) for i in keep],
                                   [tasks[i].actions_text for i in keep], batch_size=batch_size)
    for i, v in zip(keep, values):
        out[i] = v
    return out


UNSUPPORTED = "unsupported tool"  # Code(...) and the other tools Lumos lists but never implemented
NO_CORPUS = "no corpus"  # KnowledgeQuery for a task without context and no tools.corpus


def _failed_with(trace: Trace, kind: str) -> bool:
    return not trace.ok and kind in (trace.error or "")


COUNTS = ("n", "correct")  # summarize's integer metrics


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``summarize``'s nested metrics as flat ``{"split", "domain", "name", "value"}`` rows (the ``metrics`` table)."""
    return [{"split": split, "domain": domain, "name": name, "value": float(value)}
            for split, domains in summary.items() for domain, values in domains.items()
            for name, value in values.items()]


def summary_from_rows(rows: Any) -> dict[str, Any]:
    """The inverse of ``summary_rows``: split -> domain -> metric, the counts back as integers."""
    out: dict[str, Any] = {}
    for row in rows:
        value = int(row["value"]) if row["name"] in COUNTS else float(row["value"])
        out.setdefault(row["split"], {}).setdefault(row["domain"], {})[row["name"]] = value
    return out


def summarize(traces: list[Trace]) -> dict[str, Any]:
    """Metrics per split and domain (plus "all"): accuracy with its 95% Wilson interval (``accuracy_lo``/``_hi``)
    and counts (``n``, ``correct``), the share of executions that ran and of those that failed because a tool is
    not implemented (``unsupported_tool_rate``) or had no corpus (``no_corpus_rate``), EM/F1 where present, and the
    capability gap: the mean log-PPL of the gold actions under the planner's plans (``gap_logppl``) and the mean
    per-task PPL (``gap_ppl``, the paper's quantity; its % change is what the paper reports)."""
    groups: dict[tuple[str, str], list[Trace]] = defaultdict(list)
    for t in traces:
        groups[(t.split, t.domain)].append(t)
        groups[(t.split, "all")].append(t)
    out: dict[str, Any] = {}
    for (split, domain), items in sorted(groups.items()):
        correct = sum(t.correct for t in items)
        lo, hi = wilson(correct, len(items))
        row: dict[str, Any] = {"n": len(items), "correct": correct, "accuracy": correct / len(items),
                               "accuracy_lo": lo, "accuracy_hi": hi,
                               "executed": sum(t.ok for t in items) / len(items),
                               # actions the offline tools could not run at all (say so instead of a silent 0)
                               "unsupported_tool_rate": sum(_failed_with(t, UNSUPPORTED) for t in items) / len(items),
                               "no_corpus_rate": sum(_failed_with(t, NO_CORPUS) for t in items) / len(items),
                               "well_formed_plans": sum(bool(t.subgoals) for t in items) / len(items)}
        for key in ("em", "f1"):
            vals = [t.scores[key] for t in items if key in t.scores]
            if vals:
                row[key] = sum(float(v) for v in vals) / len(vals)
        gaps = [t.gold_logppl for t in items if t.gold_logppl is not None and t.gold_logppl == t.gold_logppl]
        if gaps:
            row["gap_logppl"] = statistics.fmean(gaps)
            row["gap_ppl"] = statistics.fmean(math.exp(min(g, 700.0)) for g in gaps)
        out.setdefault(split, {})[domain] = row
    return out


def evaluate(planner: Agent, grounder: Agent, tasks: list[Task], settings: EvaluateSection,
             gap: bool = True, toolbox: Toolbox | None = None) -> tuple[dict[str, Any], list[Trace]]:
    """Run the agents on ``tasks`` and return ``(metrics, traces)``; ``toolbox`` holds the run's QA model and corpus
    (``engine.outcome.toolbox_for``)."""
    if settings.formulation == "iterative":
        traces = run_iterative(planner, grounder, tasks, settings, toolbox=toolbox)
    else:
        traces = run_onetime(planner, grounder, tasks, settings, toolbox)
    if gap:
        values = gold_logppl(grounder, tasks, [t.subgoals for t in traces], settings.batch_size)
        for trace, value in zip(traces, values):
            trace.gold_logppl = value if value == value else None
    return summarize(traces), traces

