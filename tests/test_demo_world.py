"""The demo world: determinism, the committed suite, and every gold action sequence executing to its answer."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from engine.demo import world
from engine.demo.world import WorldConfig, generate_suite
from engine.evaluate import execute_for
from engine.metrics import score_answer
from engine.tasks import load_tasks, write_tasks

ROOT = Path(__file__).resolve().parents[1]


def test_generator_is_deterministic(tmp_path):
    small = WorldConfig.small()
    write_tasks(generate_suite(small), tmp_path / "a.jsonl")
    write_tasks(generate_suite(small), tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    other = generate_suite(WorldConfig.small(seed=8))
    assert [t.question for t in other] != [t.question for t in generate_suite(small)]


def test_committed_suite_regenerates_exactly(tmp_path):
    committed = ROOT / "examples" / "demo" / "tasks.jsonl"
    write_tasks(generate_suite(), tmp_path / "tasks.jsonl")
    assert (tmp_path / "tasks.jsonl").read_bytes() == committed.read_bytes()


def test_splits_templates_and_uniqueness():
    tasks = list(load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl"))
    assert len(tasks) <= 5000
    assert len({t.question for t in tasks}) == len(tasks)
    held_out_templates = {t.meta["template"] for t in tasks if t.split == "held_out"}
    held_in_templates = {t.meta["template"] for t in tasks if t.split != "held_out"}
    assert held_out_templates and not held_out_templates & held_in_templates
    counts = Counter((t.domain, t.split) for t in tasks)
    assert all(counts[(d, s)] > 0 for d in ("maths", "qa") for s in ("train", "held_in", "held_out"))
    steps = Counter(len(t.gold_actions) for t in tasks if t.domain == "maths")
    assert min(steps) >= 2 and max(steps) >= 3


def test_every_gold_action_sequence_executes_to_the_gold_answer():
    for task in load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl"):
        result = execute_for(task, task.actions_text)
        assert result.ok, (task.id, result.error)
        assert score_answer(task.domain, result.answer, task.answer)["correct"], (task.id, result.answer)


def test_warm_start_data_builds_the_capability_gap(demo_tasks):
    train = [t for t in demo_tasks if t.split == "train"]
    styles = Counter(style for _, _, style in world.planner_warm_start(train, seed=0))
    assert set(styles) == {"concrete", "vague", "mixed", "flawed"}
    for task, subgoals in world.grounder_warm_start(train):
        assert subgoals == task.gold_subgoals  # the grounder only ever sees concrete plans
    task = train[0]
    assert task.meta["vague_subgoals"] != task.gold_subgoals
    operations = ("Multiply", "Add", "Subtract", "Divide", "Answer", "Calculate")
    assert all(s.startswith(operations) for t in train for s in t.gold_subgoals)
