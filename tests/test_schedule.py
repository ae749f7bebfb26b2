"""Curricula (``[[schedule.phases]]``): phases parsed and checked with located errors, each iteration run under its
phase's stages and settings, the store naming the phase, and a two-phase curriculum SIGKILLed between its phases
resuming to the rows of an uninterrupted run."""

from __future__ import annotations

import copy
import json
import signal
from pathlib import Path

import pytest

from engine.config import config_from_dict, config_to_dict, config_to_toml, load_config
from engine.errors import ConfigError
from engine.loop import create_run, run_loop
from engine.schedule import describe, iteration_config, phase_of
from engine.store import Store

ROOT = Path(__file__).resolve().parents[1]
EXECUTOR = ["sample", "score", "ground", "critique", "train_grounder", "evaluate"]
TWO_PHASES = [{"name": "executor", "iterations": 1, "stages": EXECUTOR, "set": ["ground.which=all"]},
              {"name": "joint", "iterations": 1}]


def _phases(phases: list[dict]) -> str:
    return "schedule.phases=" + json.dumps(phases)


def test_phases_deal_iterations_in_order_and_the_last_repeats():
    config = load_config(None, [_phases([{"name": "a", "iterations": 2, "stages": EXECUTOR},
                                         {"name": "b", "set": ["sft.epochs=3"]}])])
    assert config.run.iterations == 3  # defaults to the phases' sum
    assert [phase_of(config, t)[1].name for t in (1, 2, 3, 4, 5)] == ["a", "a", "b", "b", "b"]
    assert phase_of(config, 0) is None
    assert iteration_config(config, 1) is config  # a phase without settings runs the run's config
    assert iteration_config(config, 4).sft.epochs == 3.0 and config.sft.epochs == 1.0
    assert describe(config) == ["1-2 a: " + ", ".join(EXECUTOR), "3 b: sample, score, pairs, train_planner, ground, "
                                "critique, train_grounder, evaluate (sft.epochs=3)"]
    explicit = load_config(None, [_phases([{"name": "a"}]), "run.iterations=4"])
    assert explicit.run.iterations == 4  # a given run.iterations wins: the last phase repeats


def test_a_curriculum_round_trips_through_toml(tmp_path):
    config = load_config(None, [_phases(TWO_PHASES)])
    path = tmp_path / "c.toml"
    path.write_text(config_to_toml(config), encoding="utf-8")
    assert load_config(path) == config
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config  # the store's snapshot


@pytest.mark.parametrize(("phases", "field", "words"), [
    ([{"name": "a", "stages": ["pairs"]}], "schedule.phases[1].stages", "add score"),
    ([{"name": "a", "stages": ["sample", "score", "ground", "train_grounder"]}], "schedule.phases[1].stages",
     "add critique"),
    ([{"name": "a", "stages": ["sampel"]}], "schedule.phases[1].stages", "did you mean 'sample'"),
    ([{"name": "a"}, {"name": "a"}], "schedule.phases[2].name", "names two phases"),
    ([{"name": " "}], "schedule.phases[1].name", "required"),
    ([{"name": "a", "set": ["run.seed=3"]}], "schedule.phases[1].set", "cannot change per phase"),
    ([{"name": "a", "set": ["evaluate.splits=[\"dev\"]"]}], "schedule.phases[1].set", "cannot change per phase"),
    ([{"name": "a", "set": ["sample.k=1"]}], "schedule.phases[1].set", "sample.k: must be >= 2"),
    ([{"name": "a", "iterations": 0}], "schedule.phases[1].iterations", "must be >= 1"),
    ([{"name": "a", "epochs": 2}], "schedule.phases[1].epochs", "unknown field"),
])
def test_a_bad_phase_is_named(phases, field, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, [_phases(phases)])
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_grpo_needs_no_pairs_in_its_phase():
    config = load_config(None, [_phases([{"name": "rl", "stages": ["train_planner", "evaluate"],
                                          "set": ["stages.planner_objective=grpo"]}])])
    assert iteration_config(config, 1).stages.planner_objective == "grpo"
    with pytest.raises(ConfigError, match="add pairs"):
        load_config(None, [_phases([{"name": "dpo", "stages": ["train_planner", "evaluate"]}])])


def _curriculum(loop_config, workdir: Path):
    """The tiny loop as a two-phase curriculum (its snapshot names run.iterations, so that is set to the sum)."""
    config = copy.deepcopy(loop_config)
    config.run.workdir = str(workdir)
    config = load_config(None, [_phases(TWO_PHASES), "run.iterations=2"], base=config_to_dict(config))
    return config


def test_each_iteration_runs_its_phase(tmp_path, loop_config):
    config = _curriculum(loop_config, tmp_path / "runs")
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"
        first, second = store.stage_status(run_id, 1), store.stage_status(run_id, 2)
        assert {s: v["status"] for s, v in first.items() if v["status"] == "skipped"} == {
            "pairs": "skipped", "train_planner": "skipped"}
        assert "not in phase 'executor'" in first["pairs"]["counts"]["note"]
        assert {v["counts"]["phase"] for v in first.values()} == {"executor"}
        assert {v["counts"]["phase"] for v in second.values()} == {"joint"}
        assert all(v["status"] == "done" for v in second.values())
        # The executor phase kept the planner and trained the grounder; the joint phase trained both.
        assert store.checkpoint(run_id, 1, "planner")["path"] == config.planner.path
        assert store.checkpoint(run_id, 1, "grounder")["path"] != config.grounder.path
        assert store.checkpoint(run_id, 2, "planner")["path"] != config.planner.path
        assert store.count("pairs", run_id, 1) == 0 and store.count("pairs", run_id, 2) > 0
        # Its settings: ground.which = all in the executor phase, the run's best (one plan per task) after it.
        tasks = len(store.frame("plans", run_id, 2)["task_id"].unique())
        distinct_1 = len(store.frame("plans", run_id, 1)[["task_id", "text"]].drop_duplicates())
        assert store.count("groundings", run_id, 1) == distinct_1 > tasks
        assert store.count("groundings", run_id, 2) == tasks
        assert store.count("metrics", run_id, 1) > 0 and store.count("metrics", run_id, 2) > 0


@pytest.mark.slow
def test_a_curriculum_killed_between_phases_resumes_to_the_uninterrupted_rows(tmp_path, loop_config):
    from tests.test_crash import _engine_run, snapshot  # the crash tests' real `engine run` and row snapshot

    rows = {}
    for name, kill in (("whole", None), ("killed", "2:sample:start")):
        db = tmp_path / f"{name}.duckdb"
        with Store(db) as store:
            run_id = create_run(store, _curriculum(loop_config, tmp_path / name))
        first = _engine_run(db, run_id, kill)
        if kill:
            assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
            with Store(db) as store:  # phase 1 whole, phase 2 begun: its first stage left running, nothing written
                assert all(v["status"] in ("done", "skipped") for v in store.stage_status(run_id, 1).values())
                assert {s: v["status"] for s, v in store.stage_status(run_id, 2).items()} == {"sample": "running"}
                assert store.count("plans", run_id, 2) == 0
            first = _engine_run(db, run_id)
        assert first.returncode == 0, first.stderr[-2000:]
        assert json.loads(first.stdout.strip().splitlines()[-1])["status"] == "done"
        rows[name] = snapshot(db, run_id)
    assert rows["killed"] == rows["whole"]


def test_the_beyond_preset_runs_both_curricula_over_three_iterations():
    from engine.experiment import load_experiment

    exp = load_experiment(ROOT / "examples" / "experiments" / "beyond.toml")
    assert set(exp.variants) == {"moat_dpo", "moat_grpo", "curriculum", "shared_curriculum", "moat_grpo_grounder"}
    assert exp.baseline == "moat_dpo"
    for name in ("curriculum", "shared_curriculum"):
        config = exp.run_config(name, 11, exp.iterations)
        assert [p.name for p in config.schedule.phases] == ["executor", "joint"] and config.run.iterations == 3
        assert [phase_of(config, t)[1].name for t in (1, 2, 3)] == ["executor", "joint", "joint"]
        assert iteration_config(config, 1).ground.which == "top_n" and iteration_config(config, 2).ground.which == \
            "best"
    shared = exp.run_config("shared_curriculum", 11, 3)
    assert shared.agents.topology == "shared" and shared.planner.path == shared.grounder.path
    assert not (shared.dpo.lora or shared.sft.lora)  # one set of weights in both roles
    assert load_config(ROOT / "examples" / "curriculum.toml").schedule == exp.run_config("curriculum", 11, 3).schedule
