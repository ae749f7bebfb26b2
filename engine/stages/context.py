"""What a stage receives: the store, the run and iteration, the config, agents, progress and a stop flag.

Stages are functions ``run(ctx) -> counts`` that read their inputs from the store (or checkpoints) and write their
outputs to it; they never call each other. ``StageContext`` also hands out the agents of an iteration (loaded once
and cached by checkpoint path) and the iteration's training tasks (a seeded sample, the same on every resume).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import RunConfig
from engine.runtime import load_agent, sample_tasks
from engine.store import Store
from engine.tasks import Task
from engine.turns import Agent

ProgressSink = Callable[[dict[str, Any]], None]


class StageStopped(Exception):
    """Raised inside a stage when the stop flag is seen between batches; the loop records status 'stopped'."""


@dataclass
class StageContext:
    store: Store
    run_id: str
    iteration: int
    config: RunConfig
    run_dir: Path
    stage: str = ""
    progress: ProgressSink | None = None
    should_stop: Callable[[], bool] = lambda: False
    _agents: dict[str, Agent] = field(default_factory=dict)  # checkpoint path -> loaded agent
    _started: float = field(default_factory=time.perf_counter)

    # -- agents -----------------------------------------------------------------------------------------------
    def agent_path(self, role: str, iteration: int) -> str:
        """The checkpoint that iteration ``iteration`` starts from: the one the previous iteration produced."""
        for t in range(iteration - 1, 0, -1):
            found = self.store.checkpoint(self.run_id, t, role)
            if found:
                return found["path"]
        return getattr(self.config, role).path

    def agent(self, role: str, iteration: int | None = None) -> Agent:
        """The planner/grounder at the start of ``iteration`` (default: this stage's iteration)."""
        path = self.agent_path(role, self.iteration if iteration is None else iteration)
        if path not in self._agents:
            section = getattr(self.config, role)
            self._agents[path] = load_agent(section, path if path != section.path else None)
        return self._agents[path]

    def forget_agents(self) -> None:
        """Drop cached models (a training stage changes weights in place; free memory between stages)."""
        self._agents.clear()

    # -- data -------------------------------------------------------------------------------------------------
    def train_tasks(self) -> list[Task]:
        tasks = self.store.get_tasks(self.run_id, split="train")
        return sample_tasks(tasks, self.config.data.train_limit, self.config.run.seed * 1000 + self.iteration)

    def iteration_dir(self) -> Path:
        path = self.run_dir / f"iter_{self.iteration:02d}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- progress ---------------------------------------------------------------------------------------------
    def report(self, done: int, total: int, message: str = "") -> None:
        if self.progress is not None:
            elapsed = time.perf_counter() - self._started
            eta = elapsed / done * (total - done) if done else None
            self.progress({"run_id": self.run_id, "iteration": self.iteration, "stage": self.stage, "done": done,
                           "total": total, "elapsed_s": round(elapsed, 1),
                           "eta_s": None if eta is None else round(eta, 1), "message": message})

    def check_stop(self) -> None:
        if self.should_stop():
            raise StageStopped(f"{self.stage} stopped at the user's request")


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]
