"""Turning a ``RunConfig`` into live objects: its tasks (filtered, sampled) and its loaded agents."""

from __future__ import annotations

import random

from engine import formats, models
from engine.config import AgentSection, RunConfig
from engine.errors import ConfigError
from engine.tasks import Task
from engine.turns import Agent


def load_run_tasks(config: RunConfig) -> list[Task]:
    """Every task of the config's data file, restricted to ``data.domains`` when given."""
    tasks = list(formats.load(config.data.format, config.data.tasks, ground=config.data.ground or None))
    if config.data.domains:
        tasks = [t for t in tasks if t.domain in config.data.domains]
        if not tasks:  # a run with no tasks would "succeed" at doing nothing
            raise ConfigError("data.domains", f"no task of {', '.join(config.data.domains)} in {config.data.tasks}")
    return tasks


def check_eval_splits(config: RunConfig, tasks: list[Task]) -> None:
    """Every split ``evaluate.splits`` names has tasks: otherwise the evaluation stage would report nothing,
    silently (a Lumos training file loads as split ``train`` only). Raises ``ConfigError`` naming the field."""
    have = sorted({t.split for t in tasks})
    for split in config.evaluate.splits:
        if not any(t.split == split for t in tasks):
            raise ConfigError("evaluate.splits", f"no {split!r} task in {config.data.tasks} (its splits: "
                                                 f"{', '.join(have) or 'none'}): name a task file with evaluation "
                                                 "tasks, or list only the splits it has")


def sample_tasks(tasks: list[Task], limit: int, seed: int) -> list[Task]:
    """A seeded subset of ``limit`` tasks in their original order (all when limit is 0 or larger)."""
    if not limit or limit >= len(tasks):
        return list(tasks)
    keep = set(random.Random(seed).sample(range(len(tasks)), limit))
    return [t for i, t in enumerate(tasks) if i in keep]


def pick_eval_tasks(tasks: list[Task], splits: list[str], limit: int, seed: int) -> list[Task]:
    """The evaluation tasks: every task of each split, or ``limit`` per split drawn with ``seed`` (the config's
    ``data.eval_seed``, never the run's seed: runs that differ only in seed are compared on the same tasks)."""
    chosen: list[Task] = []
    for split in splits:
        chosen += sample_tasks([t for t in tasks if t.split == split], limit, seed)
    return chosen


def load_agent(section: AgentSection, path: str | None = None, adapter: str | None = None) -> Agent:
    """Load the agent a config section names (or an explicit checkpoint ``path`` that replaces it)."""
    spec = models.ModelSpec(path=path or section.path, adapter=adapter if path else (section.adapter or None),
                            dtype=section.dtype, device=section.device)
    model, tokenizer = models.load_model(spec)
    return Agent(model, tokenizer, section.chat_template)
