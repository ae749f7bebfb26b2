"""``data.exclude_tasks``: train tasks a run leaves out, e.g. those the warm-start agents were fit to
(``demo-models`` writes their ids beside build.json), so MOAT aligns on training tasks the agents have not seen;
every listed id must be a train task of the run's files, and errors name the file and line."""

from __future__ import annotations

import random
import re

import pytest

from engine.config import config_from_dict
from engine.demo.agents import WARM_START_TASKS
from engine.errors import ConfigError, DataError
from engine.loop import create_run
from engine.runtime import load_run_tasks
from engine.stages.train import original_grounder_rows
from engine.store import Store
from engine.tasks import write_tasks


def _config(tmp_path, tasks_file, exclude: str, agents) -> object:
    return config_from_dict({"planner": {"path": str(agents / "planner")},
                             "grounder": {"path": str(agents / "grounder")},
                             "run": {"workdir": str(tmp_path / "runs")},
                             "data": {"tasks": str(tasks_file), "exclude_tasks": exclude},
                             "evaluate": {"splits": ["held_in", "held_out"]}})


def test_a_run_trains_only_on_train_tasks_its_warm_start_did_not_see(tmp_path, tiny_agents_dir, demo_tasks):
    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    listed = (tiny_agents_dir / WARM_START_TASKS).read_text().split()
    train = [t for t in demo_tasks if t.split == "train"]
    # The fixture built on a seeded sample of 24 train tasks: the file names exactly those.
    assert listed == [t.id for t in random.Random(0).sample(train, 24)]
    config = _config(tmp_path, tasks_file, str(tiny_agents_dir / WARM_START_TASKS), tiny_agents_dir)
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, config)
        kept = [t.id for t in store.get_tasks(run_id, split="train")]
        evaluated = {s: len(store.get_tasks(run_id, split=s)) for s in ("held_in", "held_out")}
    assert kept == [t.id for t in train if t.id not in set(listed)] and len(kept) == len(train) - 24
    assert evaluated == {s: sum(t.split == s for t in demo_tasks) for s in ("held_in", "held_out")}
    # Stage 2's replayed "original data" is what the warm start was fit to, not the run's fresh train tasks.
    original = original_grounder_rows(config, [t for t in demo_tasks if t.id in set(kept)])
    assert sorted(task.id for task, *_ in original) == sorted(listed)


@pytest.mark.parametrize("lines, where, message", [
    (["{train0}", "# a comment", "{held_in0}"], ":3: id: ", "is a held_in task"),
    (["{train0}", "", "demo-nope-0001"], ":3: id: ", "not a task of the run's data files"),
    (["{train0}  # twice", "{train0}"], ":2: id: ", "listed twice (first on line 1)"),
])
def test_a_bad_exclude_file_is_refused_at_its_line(tmp_path, demo_tasks, lines, where, message):
    tasks_file, exclude = tmp_path / "tasks.jsonl", tmp_path / "exclude.txt"
    write_tasks(demo_tasks, tasks_file)
    first = {s: next(t.id for t in demo_tasks if t.split == s) for s in ("train", "held_in")}
    exclude.write_text("\n".join(line.format(train0=first["train"], held_in0=first["held_in"]) for line in lines))
    config = _config(tmp_path, tasks_file, str(exclude), tmp_path)
    with pytest.raises(DataError, match=re.escape(message)) as error:
        load_run_tasks(config)
    assert str(error.value).startswith(f"{exclude}{where}")


def test_a_missing_file_or_one_that_excludes_every_train_task_is_refused(tmp_path, demo_tasks):
    tasks_file, exclude = tmp_path / "tasks.jsonl", tmp_path / "exclude.txt"
    write_tasks(demo_tasks, tasks_file)
    with pytest.raises(DataError, match="data.exclude_tasks: cannot read the file"):
        load_run_tasks(_config(tmp_path, tasks_file, str(tmp_path / "absent.txt"), tmp_path))
    exclude.write_text("".join(f"{t.id}\n" for t in demo_tasks if t.split == "train"))
    with pytest.raises(ConfigError, match="lists every train task"):
        load_run_tasks(_config(tmp_path, tasks_file, str(exclude), tmp_path))
