"""The planner's GRPO stage holds the grounder only when a configured reward reads it (gap, execution): with rewards
that need no grounder it neither loads one nor keeps the one an earlier stage of the process left cached."""

from __future__ import annotations

import pytest

GRPO_STAGE = ["stages.planner_objective=grpo", "grpo.num_generations=2", "grpo.batch_size=2", "grpo.max_steps=1",
              "grpo.max_completion_length=8", "grpo.bf16=false"]


@pytest.fixture
def grpo_run(tmp_path, tiny_agents_dir, demo_tasks, monkeypatch):
    """``(store, run_id, config, loaded)`` of a fresh run; ``loaded`` lists the model path of every agent a stage
    context loads from disk from now on."""
    from engine.config import load_config
    from engine.loop import create_run
    from engine.stages import context
    from engine.store import Store
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    config = load_config(None, [*tiny_overrides(tmp_path, tiny_agents_dir, tasks_file), *GRPO_STAGE,
                                "grpo.rewards=format"])
    loaded: list[str] = []
    original = context.load_agent

    def counting_load(section, path=None):
        loaded.append(section.path)
        return original(section, path)

    monkeypatch.setattr(context, "load_agent", counting_load)
    with Store(tmp_path / "s.duckdb") as store:
        yield store, create_run(store, config), config, loaded


def test_grpo_without_grounder_rewards_never_loads_the_grounder(grpo_run):
    from engine.loop import run_stage

    store, run_id, config, loaded = grpo_run
    # train_planner reads only the run's tasks and the planner: it runs alone, in a fresh context (a resumed run)
    assert run_stage(store, run_id, 1, "train_planner") == "done"
    assert store.stage_status(run_id, 1)["train_planner"]["counts"]["rewards"] == ["format"]
    assert store.count("rollouts", run_id, 1) == 2
    assert config.planner.path in loaded and config.grounder.path not in loaded


def test_grpo_without_grounder_rewards_drops_a_cached_grounder(grpo_run, monkeypatch):
    from engine import training
    from engine.loop import run_directory, run_stage
    from engine.stages.context import StageContext

    store, run_id, config, _ = grpo_run
    ctx = StageContext(store, run_id, 1, config, run_directory(store, run_id))
    grounder_path = config.grounder.path
    ctx.agent("grounder")  # as the score stage leaves it, earlier in the same process
    cached_while_training: list[list[str]] = []
    original = training.grpo_train

    def spying_train(*args, **kwargs):
        cached_while_training.append(list(ctx._agents))
        return original(*args, **kwargs)

    monkeypatch.setattr(training, "grpo_train", spying_train)
    assert run_stage(store, run_id, 1, "train_planner", context=ctx) == "done"
    assert len(cached_while_training) == 1 and grounder_path not in cached_while_training[0]


@pytest.mark.parametrize("rewards", ["gap,format", "execution"])
def test_a_reward_that_reads_the_grounder_loads_it_once(grpo_run, rewards):
    from engine.loop import run_directory
    from engine.stages.context import StageContext
    from engine.stages.train_grpo import build_book

    store, run_id, config, loaded = grpo_run
    config.grpo.rewards = rewards.split(",")
    ctx = StageContext(store, run_id, 1, config, run_directory(store, run_id))
    tasks = {t.id: t for t in store.get_tasks(run_id, split="train")}
    book = build_book(ctx, tasks)
    assert [r.__name__ for r in book.rewards] == rewards.split(",")
    assert loaded.count(config.grounder.path) == 1


def test_a_grounder_that_is_the_planner_stays_cached(grpo_run):
    from engine.loop import run_directory
    from engine.stages.context import StageContext
    from engine.stages.train_grpo import drop_unread_grounder

    store, run_id, config, loaded = grpo_run
    config.grounder.path = config.planner.path  # both roles load one model: dropping it would drop the planner
    ctx = StageContext(store, run_id, 1, config, run_directory(store, run_id))
    planner = ctx.agent("planner")
    drop_unread_grounder(ctx, ["format"])
    assert ctx.agent("planner") is planner and loaded == [config.planner.path]
