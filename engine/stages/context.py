"""What a stage receives: the store, the run and iteration, the config, agents, progress and a stop flag.

Stages are functions ``run(ctx) -> counts`` that read their inputs from the store (or checkpoints) and write their
outputs to it; they never call each other. ``StageContext`` also hands out the agents of an iteration (loaded once
and cached by checkpoint path) and the iteration's training tasks (a seeded sample, the same on every resume).

Crash safety: a stage commits each batch in one transaction and lays out its batches over its *whole* input (not
just what is left), skipping batches already stored, so a resumed stage makes exactly the batches -- and seeds --
an uninterrupted one would. ``crash_point`` is a test hook (``$MOAT_KILL_AT``, inert unless set) that SIGKILLs the
process at a named point of a stage; tests/test_crash.py uses it to kill a real run at every stage.
"""

from __future__ import annotations

import copy
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import RunConfig
from engine.errors import StageStopped
from engine.models import ModelSpec
from engine.runtime import load_agent, sample_tasks
from engine.store import Store
from engine.tasks import Task
from engine.topology import RoleModel, SharedBase
from engine.turns import Agent

ProgressSink = Callable[[dict[str, Any]], None]
KILL_ENV = "MOAT_KILL_AT"


def crash_point(iteration: int, stage: str, point: str | int) -> None:
    """SIGKILL this process if ``$MOAT_KILL_AT`` is ``"<iteration>:<stage>:<point>"``; otherwise do nothing.

    Points: ``N`` = right after the stage's Nth progress report (N batches committed, or N training log lines
    stored); ``save`` = halfway through writing a training checkpoint; ``start`` = the stage marked running, nothing
    done yet (``engine.loop.run_stage``). A test hook, so crash tests choose the moment
    by progress rather than by sleeping; SIGKILL because it gives the process no chance to clean up.
    """
    if os.environ.get(KILL_ENV) == f"{iteration}:{stage}:{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def starting_checkpoint(store: Store, run_id: str, role: str, iteration: int) -> tuple[int, str] | None:
    """``(t, path)`` of the checkpoint iteration ``iteration`` starts from: the latest one an earlier iteration
    produced (iteration 0 produces checkpoints only with ``warm_start``); ``None``: the configured model."""
    for t in range(iteration - 1, -1, -1):
        found = store.checkpoint(run_id, t, role)
        if found:
            return t, found["path"]
    return None


# The stages of an iteration that run after the planner trained: with one set of weights they see its new weights.
AFTER_PLANNER_TRAINING = ("ground", "critique", "train_grounder", "evaluate")


def latest_weights(store: Store, run_id: str, iteration: int, current: bool) -> str | None:
    """One model in both roles, without LoRA (``agents.topology = shared``): the newest checkpoint of *either* role
    before ``iteration`` -- or up to it, when ``current`` (a stage of that iteration after the planner trained: the
    grounder's stages see the planner's new weights, since they are the same model). Within an iteration the
    grounder trains after the planner, so its checkpoint is the newer one. ``None``: the configured model."""
    last = iteration if current else iteration - 1
    for t in range(last, -1, -1):
        for role in ("grounder", "planner"):
            found = store.checkpoint(run_id, t, role)
            if found:
                return found["path"]
    return None


def one_set_of_weights(config: RunConfig) -> bool:
    """The shared topology without LoRA: both roles are the same weights, trained on both roles' data in turn."""
    settings = config.grpo if config.stages.planner_objective == "grpo" else config.dpo
    return config.agents.topology == "shared" and not settings.lora


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
    _agents: dict[str, Agent] = field(default_factory=dict)  # checkpoint path (role:path when shared) -> agent
    _shared: SharedBase | None = None  # agents.topology = shared: the one base both roles' adapters sit on
    _started: float = field(default_factory=time.perf_counter)
    _reports: int = 0  # progress reports of the current stage run (crash_point's N)

    # -- agents -----------------------------------------------------------------------------------------------
    def agent_path(self, role: str, iteration: int) -> str:
        """The checkpoint that iteration ``iteration`` starts from (``starting_checkpoint``); with one set of
        weights in both roles, the newest weights either role's training wrote (``latest_weights``)."""
        if one_set_of_weights(self.config):
            current = iteration == self.iteration and self.stage in AFTER_PLANNER_TRAINING
            path = latest_weights(self.store, self.run_id, iteration, current)
            return path or getattr(self.config, role).path
        found = starting_checkpoint(self.store, self.run_id, role, iteration)
        return found[1] if found else getattr(self.config, role).path

    def agent(self, role: str, iteration: int | None = None) -> Agent:
        """The planner/grounder at the start of ``iteration`` (default: this stage's iteration)."""
        path = self.agent_path(role, self.iteration if iteration is None else iteration)
        section = getattr(self.config, role)
        if self.config.agents.topology == "shared" and not one_set_of_weights(self.config):
            key = f"{role}:{path}"
            if key not in self._agents:
                if self._shared is None:
                    self._shared = SharedBase(ModelSpec(section.path, section.adapter or None, section.dtype,
                                                        section.device))
                model, tokenizer = self._shared.role_model(role, path)
                self._agents[key] = Agent(model, tokenizer, section.chat_template)
            return self._agents[key]
        if path not in self._agents:  # keyed by path: one set of weights in both roles is loaded once
            self._agents[path] = load_agent(section, path if path != section.path else None)
        return self._agents[path]

    @property
    def shared_base(self) -> SharedBase | None:
        """The one base both roles run on (``agents.topology = shared``), once a stage has loaded an agent."""
        return self._shared

    def plain_model(self, role: str, iteration: int | None = None):
        """``role``'s model at the start of ``iteration`` as a plain transformers model, for TRL (a frozen reference):
        the cached agent's own, or with a shared base the role's adapter chain merged into a fresh load of it."""
        agent = self.agent(role, iteration)
        if not isinstance(agent.model, RoleModel):
            return agent.model
        section = getattr(self.config, role)
        path = self.agent_path(role, self.iteration if iteration is None else iteration)
        return load_agent(section, path if path != section.path else None).model

    def model_copy(self, role: str, iteration: int | None = None):
        """A plain model of ``role`` the caller may train; the cached agents (and a shared base) stay as they are."""
        model = self.plain_model(role, iteration)
        return copy.deepcopy(model) if model is self.agent(role, iteration).model else model

    def take_model(self, role: str):
        """``role``'s model for in-process training, with nothing else left in the cache: the cached agent's own
        model, taken out of the cache (trained in place, no copy), or with a shared base a fresh load of the role's
        merged chain. Training holds the policy, a DPO reference and the optimizer state; the planner's copy beside
        its cached original and the grounder left cached by the score stage were two more models on the device (four
        7B models in a DPO step of examples/paper.toml). Taken out, a model stopped halfway through training is
        never served to a later stage; the loop drops the cache after every training stage anyway."""
        agent = self.agent(role)
        model = self.plain_model(role) if isinstance(agent.model, RoleModel) else agent.model
        self._agents.clear()  # the shared base (self._shared) stays: the other role's adapters live on it
        return model

    def forget_agent(self, path: str) -> None:
        """Drop the cached agent loaded from ``path`` (a caller done with it frees its memory early); with a shared
        base the base stays (the other role's view needs it) until ``forget_agents``."""
        self._agents.pop(path, None)
        for key in [k for k in self._agents if k.endswith(f":{path}")]:
            self._agents.pop(key)

    def forget_agents(self) -> None:
        """Drop cached models (a training stage changes weights in place; free memory between stages)."""
        self._agents.clear()
        self._shared = None

    # -- data -------------------------------------------------------------------------------------------------
    def train_tasks(self) -> list[Task]:
        tasks = self.store.get_tasks(self.run_id, split="train")
        return sample_tasks(tasks, self.config.data.train_limit, self.config.run.seed * 1000 + self.iteration)

    def iteration_dir(self) -> Path:
        path = self.run_dir / f"iter_{self.iteration:02d}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- progress ---------------------------------------------------------------------------------------------
    def begin(self, iteration: int, stage: str, progress: ProgressSink | None,
              should_stop: Callable[[], bool]) -> None:
        """Point the context at a new stage run (the loop reuses one context, and its cached agents, for all)."""
        self.iteration, self.stage, self.progress, self.should_stop = iteration, stage, progress, should_stop
        self._started, self._reports = time.perf_counter(), 0

    def announce(self, note: str = "") -> None:
        """Tell the progress sink the stage has started (``done = total = 0``, message "started[: note]"), so a
        display opens the stage's bar and closes the previous one now, not at the stage's first committed batch.
        Not a report: the crash tests' counter does not move."""
        if self.progress is not None:
            self.progress({"run_id": self.run_id, "iteration": self.iteration, "stage": self.stage, "done": 0,
                           "total": 0, "elapsed_s": 0.0, "eta_s": None,
                           "message": f"started: {note}" if note else "started"})

    def report(self, done: int, total: int, message: str = "") -> None:
        """Report progress; stages call it after each committed batch (so it is also the crash tests' clock)."""
        self._reports += 1
        if self.progress is not None:
            elapsed = time.perf_counter() - self._started
            eta = elapsed / done * (total - done) if done else None
            self.progress({"run_id": self.run_id, "iteration": self.iteration, "stage": self.stage, "done": done,
                           "total": total, "elapsed_s": round(elapsed, 1),
                           "eta_s": None if eta is None else round(eta, 1), "message": message})
        crash_point(self.iteration, self.stage, self._reports)

    def check_stop(self) -> None:
        if self.should_stop():
            raise StageStopped(f"{self.stage} stopped at the user's request")


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def pending_batches(items: list[Any], size: int, is_done: Callable[[Any], bool]) -> list[tuple[int, list[Any]]]:
    """``(index, batch)`` for every batch of ``items`` that still has an item not done.

    Batches are cut from the whole list, so a resumed stage's batches -- and the per-batch seeds derived from their
    index -- are those of an uninterrupted run: the same inputs sampled together under the same seed give the same
    rows. A batch is committed in one transaction, so it is all done or all to do (one with any item missing is
    redone whole, rewriting its stored rows with the same values).
    """
    return [(i, b) for i, b in enumerate(batches(items, size)) if not all(is_done(x) for x in b)]
