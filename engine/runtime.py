"""Turning a ``RunConfig`` into live objects: its tasks (filtered, sampled) and its loaded agents."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from engine import formats, models
from engine.config import AgentSection, DataSource, RunConfig
from engine.errors import ConfigError, DataError
from engine.tasks import Task
from engine.turns import Agent


def data_sources(config: RunConfig) -> list[DataSource]:
    """The files a run's tasks come from: ``data.sources``, or the single ``data.tasks`` file."""
    if config.data.sources:
        return list(config.data.sources)
    return [DataSource(path=config.data.tasks, format=config.data.format, ground=config.data.ground)]


def describe_sources(config: RunConfig) -> str:
    """The task files, for messages: ``a.jsonl`` or ``a.jsonl (lumos, train), b.jsonl (gsm8k, held_in)``."""
    sources = data_sources(config)
    if not config.data.sources:
        return sources[0].path
    return ", ".join(f"{s.path} ({s.format}, {s.split or 'default split'})" for s in sources)


def check_files_exist(config: RunConfig) -> None:
    """A ``ConfigError`` naming the config field (``data.sources[2].path``, ``data.tasks``) of the first data file
    that is not there. A file's own errors name the file; a missing one is the config's mistake, and the usual cause
    is a relative path read from another directory than the one it was written for."""
    if config.data.sources:
        fields = [(f"data.sources[{i}]", s.path, s.ground) for i, s in enumerate(config.data.sources, 1)]
        named = [(f"{where}.path", path) for where, path, _ in fields]
        named += [(f"{where}.ground", ground) for where, _, ground in fields if ground]
    else:
        named = [("data.tasks", config.data.tasks)] + ([("data.ground", config.data.ground)] if config.data.ground
                                                        else [])
    for field_name, path in named:
        found = Path(path)
        if found.exists() and not found.is_dir():  # a pipe (<(zcat x.gz), /dev/stdin) is read as a file is
            continue
        what = f"{path} is a directory, not a file" if found.is_dir() else f"no file {path}"
        where = "" if found.is_absolute() else (f" (a relative path is read from the current directory, "
                                                f"{Path.cwd()}, not from the config file's)")
        raise ConfigError(field_name, what + where)


def load_run_tasks(config: RunConfig, *, keep_excluded: bool = False) -> list[Task]:
    """Every task of the config's data files, less the train tasks ``data.exclude_tasks`` lists (unless
    ``keep_excluded``), restricted to ``data.domains`` when given. Each source is read whole
    and checked before the next (``engine.formats.load``); an id in two sources is a ``DataError`` naming both,
    since ids key every later join."""
    check_files_exist(config)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for index, source in enumerate(data_sources(config), 1):
        for task in formats.load(source.format, source.path, ground=source.ground or None,
                                 split=source.split or None):
            if source.id_prefix:
                task = dataclasses.replace(task, id=source.id_prefix + task.id)
            if task.id in seen:
                fix = (f"give one of them an id_prefix (data.sources[{index}].id_prefix = \"...\")"
                       if config.data.sources and seen[task.id] != source.path else "ids must be unique across "
                       "data.sources")
                raise DataError(source.path, None, "id", f"duplicate id {task.id!r}: {seen[task.id]} has it too; "
                                                         f"{fix}")
            seen[task.id] = source.path
            tasks.append(task)
    if config.data.exclude_tasks and not keep_excluded:
        tasks = without_excluded(tasks, config.data.exclude_tasks)
    if config.data.domains:
        tasks = [t for t in tasks if t.domain in config.data.domains]
        if not tasks:  # a run with no tasks would "succeed" at doing nothing
            raise ConfigError("data.domains", f"no task of {', '.join(config.data.domains)} in "
                                              f"{describe_sources(config)}")
    return tasks


def read_task_ids(path: str) -> dict[str, int]:
    """``{task id: line}`` of an id-per-line file (blank lines and ``#`` comments skipped); ``DataError`` for a
    missing file or an id listed twice."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(path, None, "data.exclude_tasks", f"cannot read the file: {exc.strerror or exc}") from None
    ids: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        task_id = raw.split("#", 1)[0].strip()
        if not task_id:
            continue
        if task_id in ids:
            raise DataError(path, number, "id", f"{task_id!r} is listed twice (first on line {ids[task_id]})")
        ids[task_id] = number
    return ids


def without_excluded(tasks: list[Task], path: str) -> list[Task]:
    """``tasks`` less the train tasks ``path`` lists. Every listed id must be a train task of ``tasks``: an id that
    is not (another task suite's file, an evaluation task) is a ``DataError`` at its line, since excluding it would
    silently do nothing or, worse, drop an evaluation task."""
    ids = read_task_ids(path)
    splits = {t.id: t.split for t in tasks}
    for task_id, number in ids.items():
        if splits.get(task_id) != "train":
            what = f"a {splits[task_id]} task" if task_id in splits else "not a task of the run's data files"
            raise DataError(path, number, "id", f"{task_id!r} is {what}: data.exclude_tasks lists train tasks only")
    kept = [t for t in tasks if t.id not in ids]
    if not any(t.split == "train" for t in kept):
        raise ConfigError("data.exclude_tasks", f"{path} lists every train task: the run would have none to train on")
    return kept


def excluded_tasks(config: RunConfig) -> list[Task]:
    """The train tasks ``data.exclude_tasks`` lists, in file order of the data (none when it is empty)."""
    if not config.data.exclude_tasks:
        return []
    ids = read_task_ids(config.data.exclude_tasks)
    return [t for t in load_run_tasks(config, keep_excluded=True) if t.id in ids]


def check_eval_splits(config: RunConfig, tasks: list[Task]) -> None:
    """Every split ``evaluate.splits`` names has tasks: otherwise the evaluation stage would report nothing,
    silently (a Lumos training file loads as split ``train`` only). Raises ``ConfigError`` naming the field."""
    have = sorted({t.split for t in tasks})
    for split in config.evaluate.splits:
        if not any(t.split == split for t in tasks):
            raise ConfigError("evaluate.splits", f"no {split!r} task in {describe_sources(config)} (its splits: "
                                                 f"{', '.join(have) or 'none'}): add a data.sources entry with "
                                                 "evaluation tasks, or list only the splits it has")


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
