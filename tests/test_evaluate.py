"""The end-to-end harness on a handful of tasks with tiny agents: traces, metrics, the capability-gap figure."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from engine import evaluate as ev
from engine import scoring
from engine.config import EvaluateSection
from engine.outcome import is_solved, run_actions
from engine.turns import grounder_prompt, read_plan


def test_onetime_harness_traces_and_metrics(tiny_agents, demo_tasks):
    planner, grounder = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "held_in"][:4] + [t for t in demo_tasks if t.split == "held_out"][:2]
    settings = EvaluateSection(batch_size=4, plan_max_new_tokens=12, ground_max_new_tokens=12)
    metrics, traces = ev.evaluate(planner, grounder, tasks, settings)
    assert [t.task_id for t in traces] == [t.id for t in tasks]
    assert set(metrics) == {"held_in", "held_out"}
    assert metrics["held_in"]["all"]["n"] == 4
    by_id = {t.id: t for t in tasks}
    for trace in traces:
        json.dumps(trace.to_dict())
        task = by_id[trace.task_id]
        # each trace is what its own plan and actions give: re-executing and re-judging agrees
        assert trace.correct == is_solved(task, run_actions(task, trace.actions))
        # the gap is the grounder's log-PPL of the gold actions given this trace's plan, scored alone
        (alone,) = scoring.score_targets(grounder.model, grounder.tokenizer,
                                         [grounder_prompt(grounder, task, trace.subgoals)], [task.actions_text])
        assert trace.gold_logppl == pytest.approx(alone, abs=1e-4) and trace.gold_logppl > 0
    for split in ("held_in", "held_out"):
        mine = [t for t in traces if t.split == split]
        row = metrics[split]["all"]
        assert row["n"] == len(mine) and row["correct"] == sum(t.correct for t in mine)
        assert row["gap_logppl"] == pytest.approx(statistics.fmean(t.gold_logppl for t in mine))
        assert row["gap_ppl"] == pytest.approx(statistics.fmean(math.exp(t.gold_logppl) for t in mine))


def test_summarize_counts_intervals_and_gap_by_split_and_domain():
    def trace(task_id, domain, correct, logppl, split="held_in"):
        return ev.Trace(task_id, split, domain, "plan", ["s"], "R1 = Calculator(1)", True, {}, "1", "1", correct,
                        gold_logppl=logppl)

    traces = [trace("a", "maths", True, 0.0), trace("b", "maths", True, math.log(3)),
              trace("c", "maths", True, None), trace("d", "qa", False, math.log(2)),
              trace("e", "qa", True, 0.5, split="held_out")]
    out = ev.summarize(traces)
    assert set(out) == {"held_in", "held_out"} and set(out["held_in"]) == {"all", "maths", "qa"}
    maths, every = out["held_in"]["maths"], out["held_in"]["all"]
    assert (maths["n"], maths["correct"], maths["accuracy"]) == (3, 3, 1.0)
    assert (every["n"], every["correct"], every["accuracy"]) == (4, 3, 0.75)
    assert (every["accuracy_lo"], every["accuracy_hi"]) == pytest.approx((0.3006, 0.9544), abs=1e-4)  # Wilson
    assert maths["gap_logppl"] == pytest.approx(math.log(3) / 2)  # a trace without a gap value is left out
    assert maths["gap_ppl"] == pytest.approx(2.0)  # mean per-task PPL: (1 + 3) / 2
    assert every["gap_ppl"] == pytest.approx(2.0)  # (1 + 3 + 2) / 3
    assert out["held_out"]["qa"]["accuracy"] == 1.0
    assert every["unsupported_tool_rate"] == 0.0


def test_tools_that_cannot_run_offline_are_counted_not_hidden(demo_tasks):
    """Code(...) is listed in the Lumos maths prompt but was never implemented; KnowledgeQuery needs a corpus. The
    metrics say how many executions failed for those reasons."""
    maths = next(t for t in demo_tasks if t.domain == "maths" and t.split == "held_in")
    qa = ev.Trace("q", "held_in", "qa", "", [], "", False, {}, None, "x", False,
                  error="R1 = KnowledgeQuery(x): no corpus")
    traces = [ev._trace(maths, "", maths.gold_subgoals, "R1 = Code(print(1))"),
              ev._trace(maths, "", maths.gold_subgoals, maths.actions_text), qa]
    assert not traces[0].ok and "unsupported tool" in traces[0].error
    row = ev.summarize(traces)["held_in"]["all"]
    assert row["unsupported_tool_rate"] == pytest.approx(1 / 3) and row["no_corpus_rate"] == pytest.approx(1 / 3)


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


def test_eval_cli_quiet_prints_the_metrics_and_no_progress_bar(tiny_agents_dir, demo_tasks, tmp_path, capsys):
    """``eval --quiet`` means what ``run --quiet`` does (eval had no such flag): none of the libraries' bars (the
    weights' loading) on stderr, the metrics still printed on stdout."""
    from pathlib import Path

    from engine.__main__ import main
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    write_tasks(demo_tasks, tmp_path / "tasks.jsonl")
    sets = [arg for item in tiny_overrides(tmp_path, tiny_agents_dir, tmp_path / "tasks.jsonl")
            for arg in ("--set", item)]
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.toml"
    assert main(["eval", "--config", str(demo), *sets, "--split", "held_in", "--limit", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["counts"] == {"held_in": 1}
    assert "Loading weights" not in captured.err and "it/s]" not in captured.err, captured.err
