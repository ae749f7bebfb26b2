"""The end-to-end harness on a handful of tasks with tiny agents: traces, metrics, the capability-gap figure."""

from __future__ import annotations

import json

from engine import evaluate as ev
from engine.config import EvaluateSection
from engine.turns import read_plan


def test_onetime_harness_traces_and_metrics(tiny_agents, demo_tasks):
    planner, grounder = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "held_in"][:4] + [t for t in demo_tasks if t.split == "held_out"][:2]
    settings = EvaluateSection(batch_size=4, plan_max_new_tokens=12, ground_max_new_tokens=12)
    metrics, traces = ev.evaluate(planner, grounder, tasks, settings)
    assert [t.task_id for t in traces] == [t.id for t in tasks]
    assert set(metrics) == {"held_in", "held_out"}
    assert metrics["held_in"]["all"]["n"] == 4
    for trace in traces:
        json.dumps(trace.to_dict())
        assert trace.gold_logppl is not None and trace.gold_logppl > 0
    assert "gap_logppl" in metrics["held_in"]["all"]


def test_gold_trace_is_correct_and_gap_prefers_gold_plans(demo_tasks):
    task = next(t for t in demo_tasks if t.domain == "maths")
    trace = ev._trace(task, "", task.gold_subgoals, task.actions_text)
    assert trace.correct and trace.ok and trace.answer == task.answer
    wrong = ev._trace(task, "", task.gold_subgoals, "R1 = Calculator(1 + 1)")
    assert wrong.ok and not wrong.correct


def test_iterative_harness_runs(tiny_agents, demo_tasks):
    planner, grounder = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "held_in"][:3]
    settings = EvaluateSection(batch_size=3, plan_max_new_tokens=10, ground_max_new_tokens=10,
                               formulation="iterative")
    metrics, traces = ev.evaluate(planner, grounder, tasks, settings, gap=False)
    assert len(traces) == 3 and metrics["held_in"]["all"]["n"] == 3


def test_read_plan():
    assert read_plan("Subgoal 1: Add 2 and 3.; Subgoal 2: Double it.") == (["Add 2 and 3.", "Double it."], True)
    assert read_plan("garbage") == ([], False)
