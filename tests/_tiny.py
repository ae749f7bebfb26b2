"""The settings of a tiny, fast loop (tiny agents, 4 training tasks, K=3, two training steps), shared by fixtures."""

from __future__ import annotations

from pathlib import Path


def tiny_overrides(tmp: Path, agents: Path, tasks_file: Path) -> list[str]:
    """``--set`` overrides for a one-iteration loop whose every stage runs in seconds."""
    return [
        f"data.tasks={tasks_file}", "data.train_limit=4", "data.eval_limit=2", f"run.workdir={tmp / 'runs'}",
        f"planner.path={agents / 'planner'}", f"grounder.path={agents / 'grounder'}",
        "sample.k=3", "sample.max_new_tokens=16", "sample.batch_size=2", "score.batch_size=4",
        "ground.max_new_tokens=16", "ground.batch_size=4", "evaluate.plan_max_new_tokens=12",
        "evaluate.ground_max_new_tokens=12", "evaluate.batch_size=4", "pairs.min_gap=0.0",
        "dpo.max_steps=2", "dpo.batch_size=2", "dpo.learning_rate=1e-3", "dpo.max_length=160",
        "sft.max_steps=2", "sft.batch_size=2", "sft.learning_rate=1e-3", "sft.max_length=256", "run.iterations=1",
    ]
