"""The demo world: determinism, the committed suite, and every gold action sequence executing to its answer."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from engine.demo import maths_world, qa_world, world
from engine.demo.world import WorldConfig, generate_suite
from engine.metrics import score_answer
from engine.outcome import run_actions
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
    templates = {(d, s): {t.meta["template"] for t in tasks if (t.domain, t.split) == (d, s)}
                 for d in ("maths", "qa") for s in ("train", "dev", "held_in", "held_out")}
    for domain in ("maths", "qa"):
        train, held_in = templates[(domain, "train")], templates[(domain, "held_in")]
        dev, held_out = templates[(domain, "dev")], templates[(domain, "held_out")]
        assert held_in <= train  # held-in tasks are new tasks of the training templates...
        assert dev and held_out and not (dev | held_out) & train and not dev & held_out  # ...the others are not
    # Every training template is represented in held-in evaluation (template-stratified draws).
    m_in, m_dev, m_out = maths_world.split_templates()
    assert templates[("maths", "held_in")] == {t.name for t in m_in}
    assert templates[("maths", "held_out")] == {t.name for t in m_out}
    q_in, q_dev, q_out = qa_world.split_templates()
    assert templates[("qa", "held_in")] == set(q_in) and templates[("qa", "held_out")] == set(q_out)
    counts = Counter((t.domain, t.split) for t in tasks)
    assert all(counts[(d, s)] > 0 for d in ("maths", "qa") for s in ("train", "dev", "held_in", "held_out"))
    steps = Counter(len(t.gold_actions) for t in tasks if t.domain == "maths")
    assert min(steps) >= 2 and max(steps) >= 3


def test_no_dev_or_held_out_question_or_template_reaches_training_data():
    """The agents' warm-start rows (and so the tokenizer) come from the train split alone."""
    from engine.demo.agents import grounder_rows, planner_rows

    tasks = list(load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl"))
    train = [t for t in tasks if t.split == "train"]
    text = "\n".join(r["prompt"] + r["completion"] for r in planner_rows(train, 0) + grounder_rows(train))
    unseen = [t for t in tasks if t.split in ("dev", "held_out")]
    assert not [t.id for t in unseen if t.question in text]
    # Held-in tasks share the training templates (not their questions: every question is unique in the suite).
    assert not {t.question for t in tasks if t.split == "held_in"} & {t.question for t in train}
    train_templates = {t.meta["template"] for t in train}
    assert not {t.meta["template"] for t in tasks if t.split in ("dev", "held_out")} & train_templates


def test_held_out_qa_hops_all_occur_in_training_in_the_same_position():
    """Held-out QA chains are new combinations of familiar hops: solvable in principle."""
    q_in, q_dev, q_out = qa_world.split_templates()
    seen = set().union(*(qa_world._positions(t) for t in q_in))
    assert all(qa_world._positions(t) <= seen for t in q_dev + q_out)
    assert any("-" in t for t in q_out) and any("-" in t for t in q_in)  # two-hop chains on both sides


def test_every_gold_action_sequence_executes_to_the_gold_answer():
    for task in load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl"):
        result = run_actions(task, task.actions_text)
        assert result.ok, (task.id, result.error)
        assert score_answer(task.domain, result.answer, task.answer)["correct"], (task.id, result.answer)


def test_warm_start_data_builds_the_capability_gap(demo_tasks):
    train = [t for t in demo_tasks if t.split == "train"]
    styles = Counter(style for _, _, style in world.planner_warm_start(train, seed=0))
    assert set(styles) == {"paraphrased", "vague", "mixed", "flawed"}
    for task, subgoals in world.grounder_warm_start(train):
        assert subgoals == task.gold_subgoals  # the grounder only ever sees concrete plans
    task = train[0]
    assert task.meta["vague_subgoals"] != task.gold_subgoals != task.meta["explicit_subgoals"]
    assert all(len(t.meta["step_renderings"]) == len(t.gold_subgoals) for t in train)
    assert all(len(r) == len(world.RENDERINGS) for t in train for r in t.meta["step_renderings"])
    operations = ("Multiply", "Add", "Subtract", "Divide", "Answer", "Calculate")
    assert all(s.startswith(operations) for t in train for s in t.gold_subgoals)


def test_a_planner_style_mix_without_concrete_plans_never_writes_them(demo_tasks):
    """``planner_styles`` without "concrete": no row carries a concrete step, mixed plans mix explicit and vague
    steps and flawed plans are explicit ones with a slip (the grounder's own wording never reaches this planner)."""
    train = [t for t in demo_tasks if t.split == "train"]
    styles = world.parse_plan_styles("explicit=0.4,vague=0.35,mixed=0.1,flawed=0.15")
    assert styles == (("explicit", 0.4), ("vague", 0.35), ("mixed", 0.1), ("flawed", 0.15))
    rows = world.planner_warm_start(train, seed=0, styles=styles)
    assert {style for _, _, style in rows} == {"explicit", "vague", "mixed", "flawed"}
    for task, subgoals, style in rows:
        concrete_only = {r[0] for r in task.meta["step_renderings"]} - {r[1] for r in task.meta["step_renderings"]}
        assert not concrete_only & set(subgoals), (style, subgoals)
        if style == "flawed":
            assert set(subgoals) <= set(task.meta["explicit_subgoals"]), subgoals
    # The default mix is the committed planner's (assets/demo/build.json), and it reads back as written.
    assert world.format_plan_styles() == "paraphrased=0.35,vague=0.35,mixed=0.15,flawed=0.15"
    assert world.parse_plan_styles(world.format_plan_styles()) == world.PLAN_STYLES
    assert world.format_plan_styles(world.FIRST_PLAN_STYLES) == \
        "concrete=0.25,explicit=0.15,vague=0.35,mixed=0.1,flawed=0.15"


def test_the_paraphrased_rendering_is_the_planners_own_wording_on_some_steps_only(demo_tasks):
    """``paraphrased`` keeps the grounder's concrete wording on the steps the agents' conventions share and uses a
    paraphrase the grounder's warm-start data never contains on the others (maths: share; QA: born_in), so a planner
    trained on it writes steps the grounder has to learn."""
    from engine.demo.agents import grounder_rows

    train = [t for t in demo_tasks if t.split == "train"]
    grounder_text = "\n".join(r["prompt"] + r["completion"] for r in grounder_rows(train))
    own_kinds = {"maths": ("share",), "qa": ("born_in",)}
    seen_shared = seen_own = 0
    for task in demo_tasks:
        renderings = task.meta["step_renderings"]
        assert [r[3] for r in renderings] == task.meta["paraphrased_subgoals"]
        template = task.meta["template"]
        uses_own = any(kind in template.split("-") for kind in own_kinds[task.domain])
        differs = [r[3] != r[0] for r in renderings]
        assert any(differs) == uses_own, (template, task.meta["paraphrased_subgoals"])
        for rendering, changed in zip(renderings, differs):
            if changed:
                seen_own += 1
                assert rendering[3] not in grounder_text, rendering[3]
            else:
                seen_shared += 1
    assert seen_own and seen_shared
    # A planner trained on the paraphrased style never writes the grounder's wording of those steps.
    styles = world.parse_plan_styles("paraphrased=0.35,vague=0.35,mixed=0.15,flawed=0.15")
    for task, subgoals, style in world.planner_warm_start(train[:200], seed=0, styles=styles):
        grounder_only = {r[0] for r in task.meta["step_renderings"] if r[3] != r[0]}
        assert not grounder_only & set(subgoals), (style, subgoals)
        if style == "flawed":
            assert set(subgoals) <= set(task.meta["paraphrased_subgoals"]), subgoals


def test_a_bad_plan_style_mix_is_refused_by_name():
    for text, needle in (("concise=1", "'concise'"), ("explicit=0", "explicit=<positive weight>"),
                         ("explicit", "explicit=<positive weight>"), ("explicit=x", "explicit=<positive weight>"),
                         ("mixed=0.5,flawed=0.5", "at least one rendering")):
        with pytest.raises(ValueError, match=needle):
            world.parse_plan_styles(text)


def test_the_pool_is_fresh_training_template_tasks_drawn_after_the_suite():
    """``pool_maths``/``pool_qa`` add tasks after every split: the suite is unchanged, no pool question equals a suite
    question, pool tasks are split train with training templates only, and their gold actions execute."""
    small = WorldConfig.small()
    with_pool = generate_suite(dataclasses.replace(small, pool_maths=12, pool_qa=6))
    suite = generate_suite(small)
    assert with_pool[:len(suite)] == suite
    pool = with_pool[len(suite):]
    assert all(world.is_pool_task(t) for t in pool) and not any(world.is_pool_task(t) for t in suite)
    assert Counter(t.domain for t in pool) == {"maths": 12, "qa": 6} and {t.split for t in pool} == {"train"}
    assert not {t.question for t in pool} & {t.question for t in suite}
    assert len({t.id for t in with_pool}) == len(with_pool)
    train_templates = {t.name for t in maths_world.split_templates()[0]} | set(qa_world.split_templates()[0])
    assert {t.meta["template"] for t in pool} <= train_templates
    for task in pool:
        result = run_actions(task, task.actions_text)
        assert score_answer(task.domain, result.answer, task.answer)["correct"], (task.id, result.answer)


def test_committed_pool_and_warm_start_list_regenerate_exactly(tmp_path):
    """examples/demo/pool.jsonl is `demo-world --pool-maths 400 --pool-qa 200 --pool-only`; the committed agents'
    warm_start_tasks.txt lists every train task of the suite (their build.json: max_train_tasks 0)."""
    import json

    from engine.commands import demo_world

    out = tmp_path / "pool.jsonl"
    parser = argparse.ArgumentParser()
    demo_world.add_arguments(parser)
    assert demo_world.run(parser.parse_args(["--pool-maths", "400", "--pool-qa", "200", "--pool-only",
                                             "--out", str(out)])) == 0
    assert out.read_bytes() == (ROOT / "examples" / "demo" / "pool.jsonl").read_bytes()
    build = json.loads((ROOT / "assets" / "demo" / "build.json").read_text())
    assert build["config"]["max_train_tasks"] == 0
    listed = (ROOT / "assets" / "demo" / "warm_start_tasks.txt").read_text().split()
    assert listed == [t.id for t in load_tasks(ROOT / "examples" / "demo" / "tasks.jsonl") if t.split == "train"]


def test_the_pool_is_never_written_over_the_suite_by_default(tmp_path, monkeypatch):
    """``--pool-only`` without ``--out`` writes examples/demo/pool.jsonl: its old default, the suite's file, replaced
    the 4,200-task suite by the 600-task pool when the README's line was run as written (CLI review)."""
    from engine.commands import demo_world

    parser = argparse.ArgumentParser()
    demo_world.add_arguments(parser)
    (tmp_path / "examples" / "demo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert demo_world.run(parser.parse_args(["--pool-maths", "4", "--pool-qa", "2", "--pool-only"])) == 0
    assert len(list(load_tasks(tmp_path / demo_world.POOL))) == 6 and not (tmp_path / demo_world.SUITE).exists()


def test_the_wide_qa_world_supports_every_unseen_hop_with_several_training_chains(tmp_path):
    """``--qa-world wide`` (examples/experiments/tune-wide-qa.toml): the same dev and held-out chains as the narrow
    world, each of their hop positions asked by two or more training templates (the narrow world: some by one); its
    splits keep the compositional guarantees, and every gold action sequence executes to its answer."""
    from engine.commands import demo_world

    narrow = qa_world.position_support(qa_world.NARROW)
    wide = qa_world.position_support(qa_world.WIDE)
    assert narrow.keys() == wide.keys() == {*qa_world.DEV_TEMPLATES, *qa_world.HELD_OUT_TEMPLATES}
    assert min(n for support in narrow.values() for n in support.values()) == 1
    assert min(n for support in wide.values() for n in support.values()) >= 2
    q_in, q_dev, q_out = qa_world.split_templates(qa_world.WIDE)
    assert len([t for t in q_in if "-" in t]) == 21 and (q_dev, q_out) == (list(qa_world.DEV_TEMPLATES),
                                                                           list(qa_world.HELD_OUT_TEMPLATES))
    assert set(qa_world.split_templates()[0]) < set(q_in)  # the narrow world's training templates, and more

    out = tmp_path / "wide.jsonl"
    parser = argparse.ArgumentParser()
    demo_world.add_arguments(parser)
    small = ["--maths-train", "6", "--maths-dev", "2", "--maths-held-in", "2", "--maths-held-out", "2",
             "--qa-train", "64", "--qa-dev", "4", "--qa-held-in", "32", "--qa-held-out", "4"]
    assert demo_world.run(parser.parse_args([*small, "--qa-world", "wide", "--out", str(out)])) == 0
    tasks = [t for t in load_tasks(out) if t.domain == "qa"]
    by_split = {s: {t.meta["template"] for t in tasks if t.split == s}
                for s in ("train", "held_in", "dev", "held_out")}
    assert by_split["held_in"] == set(q_in) and by_split["dev"] == set(q_dev) and by_split["held_out"] == set(q_out)
    assert not (by_split["dev"] | by_split["held_out"]) & by_split["train"]
    for task in tasks:
        result = run_actions(task, task.actions_text)
        assert score_answer(task.domain, result.answer, task.answer)["correct"], (task.id, result.answer)
    with pytest.raises(ValueError, match="QA world 'wider': expected one of narrow, wide"):
        generate_suite(dataclasses.replace(WorldConfig.small(), qa_world="wider"))
