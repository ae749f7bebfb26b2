"""The quick check before one stage (``engine.preflight.check_stage_agents``) needs the grounder for GRPO's planner
stage only when a configured reward reads it (``engine.config_training.GROUNDER_READERS``: gap, execution), as the
stage loads it (engine/stages/train_grpo.py); GRPO's grounder stage never needs the planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import config_to_dict, load_config
from engine.errors import CheckpointError
from engine.preflight import check_stage_agents
from engine.store import Store


def _check(tmp_path: Path, demo_tasks, stage: str, overrides: list[str]) -> None:
    """``check_stage_agents`` for ``stage`` of iteration 1 of a fresh run of ``overrides``; the configured models
    are empty directories (only existence is checked) unless an override names a missing one."""
    for role in ("planner", "grounder"):
        (tmp_path / role).mkdir(exist_ok=True)
    config = load_config(None, [f"planner.path={tmp_path / 'planner'}", f"grounder.path={tmp_path / 'grounder'}",
                                f"run.workdir={tmp_path / 'runs'}", *overrides])
    with Store(tmp_path / "s.duckdb") as store:
        run_id = store.create_run("grpo", config_to_dict(config), tmp_path / "runs", demo_tasks)
        check_stage_agents(store, run_id, 1, stage, config)


def test_grpo_rewards_that_never_read_the_grounder_do_not_need_it(tmp_path, demo_tasks):
    missing = tmp_path / "gone"
    # Before: "grounder.path: .../gone: no such model directory (train_planner of iteration 1 loads the configured
    # grounder)", though the stage never loads it with these rewards.
    _check(tmp_path, demo_tasks, "train_planner", ["stages.planner_objective=grpo", "grpo.rewards=format",
                                                   f"grounder.path={missing}"])


@pytest.mark.parametrize("rewards", ["gap", "execution,format"])
def test_a_grpo_reward_that_reads_the_grounder_still_needs_it(tmp_path, demo_tasks, rewards):
    missing = tmp_path / "gone"
    with pytest.raises(CheckpointError, match=rf"grounder.path: {missing}: no such model directory \(train_planner of "
                                              r"iteration 1 loads the configured grounder\)"):
        _check(tmp_path, demo_tasks, "train_planner", ["stages.planner_objective=grpo", f"grpo.rewards={rewards}",
                                                       f"grounder.path={missing}"])


def test_grpo_of_the_grounder_does_not_need_the_planner(tmp_path, demo_tasks):
    _check(tmp_path, demo_tasks, "train_grounder", ["stages.grounder_objective=grpo",
                                                    f"planner.path={tmp_path / 'gone'}"])


def test_the_planner_stage_reads_the_one_list_of_grounder_readers():
    from engine.config_training import GROUNDER_READERS, REWARD_NAMES
    from engine.stages import train_grpo

    assert train_grpo.GROUNDER_READERS is GROUNDER_READERS and GROUNDER_READERS <= set(REWARD_NAMES)
