"""``[warm_start]``: iteration 0 trains the configured models by SFT on the training tasks' gold plans and actions
(the paper's Lumos agents), evaluates those, and iteration 1 starts from them; stoppable and resumable."""

from __future__ import annotations

import pytest
import torch

from engine import prompts
from engine.loop import create_run, run_loop, run_stage, stages_of
from engine.stages.context import StageContext
from engine.stages.warm_start import planner_rows
from engine.store import Store

pytestmark = pytest.mark.slow  # trains tiny models


def _weights(path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return {n: p.detach().clone() for n, p in AutoModelForCausalLM.from_pretrained(path).named_parameters()}


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[n], b[n]) for n in a)


def test_iteration_zero_trains_then_evaluates_the_warm_started_agents(tmp_path, loop_config, tiny_agents_dir):
    loop_config.warm_start.enabled = True
    assert stages_of(0, loop_config) == ["warm_start_planner", "warm_start_grounder", "evaluate"]
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_loop(store, run_id, iterations=0) == "done"
        states = store.stage_status(run_id, 0)
        assert {s: states[s]["status"] for s in stages_of(0, loop_config)} == {s: "done" for s in
                                                                               stages_of(0, loop_config)}
        ctx = StageContext(store, run_id, 1, loop_config, tmp_path / "runs" / run_id)
        for role in ("planner", "grounder"):
            checkpoint = store.checkpoint(run_id, 0, role)
            assert checkpoint and ctx.agent_path(role, 1) == checkpoint["path"]  # iteration 1 starts from it
            assert _changed(_weights(tiny_agents_dir / role), _weights(checkpoint["path"]))
            logs = store.frame("train_logs", run_id, 0, stage=f"warm_start_{role}")
            assert logs["loss"].notna().any()
        assert len(store.frame("metrics", run_id, 0)) > 0  # the warm-started agents were evaluated


def test_a_stopped_warm_start_leaves_no_checkpoint_and_reruns(tmp_path, loop_config):
    loop_config.warm_start.enabled = True
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_stage(store, run_id, 0, "warm_start_planner", config=loop_config,
                         should_stop=lambda: True) == "stopped"
        assert store.checkpoint(run_id, 0, "planner") is None
        assert run_stage(store, run_id, 0, "warm_start_planner", config=loop_config) == "done"
        assert store.checkpoint(run_id, 0, "planner") is not None
        with pytest.raises(ValueError, match="iteration 0 only"):
            run_stage(store, run_id, 1, "warm_start_planner", config=loop_config)


def test_planner_rows_teach_the_gold_plan_in_each_formulation(tiny_agents, demo_tasks):
    planner, _ = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "train" and t.gold_subgoals][:3]
    onetime = planner_rows(planner, tasks, "onetime")
    assert [r["completion"] for r in onetime] == [prompts.format_subgoals(t.gold_subgoals) for t in tasks]
    iterative = planner_rows(planner, tasks, "iterative")
    assert len(iterative) == sum(len(t.gold_subgoals) + 1 for t in tasks)  # every subgoal, then "stop planning"
    assert iterative[0]["completion"].startswith("Subgoal 1: ")
    assert iterative[len(tasks[0].gold_subgoals)]["completion"].endswith(prompts.STOP_PLANNING)
