"""GRPO's stages train the cached model itself, taken out of the stage context's cache (``StageContext.take_model``,
as DPO and SFT do): no second copy of the policy beside its cached original while training, and a training stopped
halfway is never served to a later stage. A planner whose grounder rewards ground with that very model (both roles
load one path) trains a copy instead, so the rewards keep scoring with the starting weights.

Training itself is not run: a stand-in for ``engine.training.grpo_train`` records what the stage holds at the moment
training would start and stops the stage there."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

GRPO = ["stages.planner_objective=grpo", "grpo.num_generations=2", "grpo.batch_size=2", "grpo.max_steps=1",
        "grpo.max_completion_length=8", "grpo.bf16=false"]


class TrainingStarted(Exception):
    """Raised by the stand-in trainer: the test has seen what it needed."""


@dataclass
class AtTrainingStart:
    cached: list[str]  # the stage context's cached agents (their cache keys)
    model: object  # the model handed to the trainer


@pytest.fixture
def grpo_context(tiny_run, monkeypatch):
    """``make(*overrides) -> (ctx, seen)``: a stage context of iteration 1 of a tiny GRPO run, its planner and
    grounder cached as the earlier stages of one process leave them, and the list the stand-in trainer appends to."""
    from engine import training
    from engine.loop import run_config, run_directory
    from engine.stages.context import StageContext
    from engine.store import Store

    seen: list[AtTrainingStart] = []
    stores: list[Store] = []

    def make(*overrides: str):
        db, run_id = tiny_run(*GRPO, *overrides)
        store = Store(db)
        stores.append(store)
        ctx = StageContext(store, run_id, 1, run_config(store, run_id), run_directory(store, run_id))
        ctx.begin(1, "train_planner", None, lambda: False)

        def stand_in(model, *args, **kwargs):
            seen.append(AtTrainingStart(list(ctx._agents), model))
            raise TrainingStarted

        monkeypatch.setattr(training, "grpo_train", stand_in)
        return ctx, seen

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("rewards", ["format", "gap,format"])
def test_grpo_trains_the_cached_planner_with_nothing_left_in_the_cache(grpo_context, rewards):
    from engine.stages.train_grpo import run_planner

    ctx, seen = grpo_context(f"grpo.rewards={rewards}")
    planner = ctx.agent("planner")
    ctx.agent("grounder")  # the score stage's, earlier in the same process
    with pytest.raises(TrainingStarted):
        run_planner(ctx)
    # Before: the planner's deep copy trained while the original stayed cached (["<planner path>"]).
    assert len(seen) == 1 and seen[0].cached == [] and seen[0].model is planner.model


def test_grpo_trains_the_cached_grounder_with_nothing_left_in_the_cache(grpo_context):
    from engine.stages.train_grpo import _train, build_grounder_book

    ctx, seen = grpo_context("stages.grounder_objective=grpo", "grpo_grounder.num_generations=2",
                             "grpo_grounder.batch_size=2", "grpo_grounder.max_steps=1")
    ctx.begin(1, "train_grounder", None, lambda: False)
    ctx.agent("planner")  # left cached by an earlier stage
    grounder = ctx.agent("grounder")
    tasks = {t.id: t for t in ctx.train_tasks()}
    rows = [{"prompt": "Subgoal 1: find it", "task_id": task_id} for task_id in tasks]
    with pytest.raises(TrainingStarted):
        _train(ctx, "grounder", grounder, rows, ctx.config.grpo_grounder, build_grounder_book(ctx, tasks), "fp32")
    assert len(seen) == 1 and seen[0].cached == [] and seen[0].model is grounder.model


def test_a_planner_that_is_its_own_grounder_trains_a_copy_when_a_reward_grounds_with_it(grpo_context, tiny_agents_dir):
    from engine.stages.train_grpo import run_planner

    ctx, seen = grpo_context("grpo.rewards=gap,format", f"grounder.path={tiny_agents_dir / 'planner'}")
    planner = ctx.agent("planner")
    assert ctx.agent("grounder") is planner  # one path: one cached agent in both roles
    with pytest.raises(TrainingStarted):
        run_planner(ctx)
    # The gap reward grounds with ``planner.model``: trained in place, its scorer would move with the policy.
    assert len(seen) == 1 and seen[0].model is not planner.model
    assert ctx.agent("grounder") is planner
