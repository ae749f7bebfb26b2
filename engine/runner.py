"""Running an experiment (``engine.experiment``) in a store: registration, resume, and the in-process runner.

Contract:

* ``register(store, exp, seeds, iterations)`` records the experiment in ``experiments`` (its definition, the
  union of the seeds and the largest iteration count ever asked for, and the fingerprints of the model and task
  files it reads, ``engine.fingerprint``); it refuses (``ConfigError``, nothing written) an experiment whose files
  changed since it was recorded, whose runs would otherwise be resumed as if nothing had; it returns whether the
  experiment is new and ``other_definitions``, the ids of other experiments of its name (read without writing, so
  a dry run can say the same). The experiment's runs are ordinary runs, grouped by
  ``experiment_runs (experiment_id, variant, seed) -> run_id``.
* ``plan_runs`` lists what one command will do, seed-major (every variant of the first seed, then the next seed),
  without writing anything (``experiment --dry-run`` prints it: ``engine.experiment_plan``; with no store yet,
  every run is to create): for each (variant, seed) the run already linked to the experiment (or a run of the same
  name and config that a kill left unlinked, or that an earlier version of the file made from the same model and
  task contents: an edited file with a new variant reuses the runs of the others), and how many
  ``(iteration, stage)`` units it still has to run for iterations 0..N, and which (from the run's job file when
  ``engine.jobs`` left one). A run with no units left is skipped; an interrupted one resumes with ``run_loop``
  (which resumes from the store); a missing one is created when its turn comes (``ensure_run``); a larger N
  extends finished runs and becomes their ``run.iterations`` (``engine.loop.extend_iterations``; never lowered).
* ``run_inprocess`` runs the plans one after the other in this process, directly in the store (the studio's way of
  running: every row is live). A failed run is reported and the next one runs; the stop flag ends the run in flight
  as ``run_loop`` does (resumable) and starts no other.
* ``swap_finished`` computes, in this process, the swap table (``engine.swap``: planner and grounder after iteration 0
  vs after the last iteration) of every finished run of the variants the experiment's ``swap`` lists, unless it is
  stored already -- after the runs, whether they ran in this process or as jobs, so a re-run completes them too.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import RunConfig, config_to_dict
from engine.dbutil import loads, records
from engine.errors import ConfigError
from engine.experiment import Experiment
from engine.loop import create_run, extend_iterations, pending, run_config, run_loop, stages_of
from engine.store import Store
from engine.stored_config import stored_config

OnRun = Callable[[str], None]  # called with a run name


@dataclass
class PlannedRun:
    variant: str
    seed: int
    name: str  # <experiment>/<variant>/s<seed>
    run_id: str | None  # the run to resume; None: created when its turn comes
    linked: bool  # run_id is already recorded in experiment_runs
    units: int  # (iteration, stage) units still to run
    job_file: Path | None = None  # a job's own store holding this run's newest rows (engine.jobs)
    todo: list[tuple[int, str]] = field(default_factory=list)  # those units, in order


@dataclass
class RunResult:
    variant: str
    seed: int
    name: str
    run_id: str | None
    status: str  # done | already done | stopped | failed | not started
    wall_s: float  # seconds this command spent on the run
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"variant": self.variant, "seed": self.seed, "name": self.name, "run_id": self.run_id,
               "status": self.status, "wall_s": round(self.wall_s, 3)}
        return {**out, "error": self.error} if self.error else out


def jobs_dir(db: str | Path) -> Path:
    """``<db-dir>/<db-stem>.jobs``: where ``engine.jobs`` keeps each job's own store and log."""
    db = Path(db)
    return db.parent / f"{db.stem}.jobs"


def job_file(db: str | Path, run_id: str) -> Path:
    return jobs_dir(db) / f"{run_id}.duckdb"


def recorded_experiment(store: Store, exp: Experiment) -> dict[str, Any] | None:
    """``exp``'s row in ``experiments`` (None: never run in this store); ``ConfigError`` when the model or task
    files it reads changed since it was recorded: its runs read other agents or tasks, and resuming them would mix
    two experiments under one id."""
    old = records(store.query("SELECT * FROM experiments WHERE experiment_id = ?", [exp.experiment_id]))
    if not old:
        return None
    changed = _changed_inputs(loads(old[0]["config_json"], {}).get("inputs"), exp.inputs())
    if changed:
        raise ConfigError("experiment", f"{', '.join(changed)} changed since experiment {exp.experiment_id} ran in "
                                        f"{store.path}; its runs used the old contents, so they are not "
                                        "resumed: run it in another store (--db)", str(exp.source))
    return old[0]


def register(store: Store, exp: Experiment, seeds: list[int], iterations: int) -> tuple[bool, list[str]]:
    """Record ``exp`` (or widen the seeds/iterations it records); returns (is it new, ids of other experiments of the
    same name: an edited file gives a new id)."""
    exp_id = exp.experiment_id
    old = recorded_experiment(store, exp)
    row: dict[str, Any] = {"experiment_id": exp_id, "name": exp.name, "source": str(exp.source)}
    inputs = exp.inputs()
    if old:
        before = loads(old["config_json"], {})
        seeds = list(dict.fromkeys([*before.get("seeds", []), *seeds]))
        iterations = max(iterations, int(before.get("iterations", 0)))
        row["created_at"] = old["created_at"]
    row["config_json"] = exp.to_json(seeds, iterations, inputs)
    store.write("experiments", [row])
    return not old, other_definitions(store, exp)


def other_definitions(store: Store, exp: Experiment) -> list[str]:
    """The ids of the other experiments of ``exp``'s name, oldest first: an edited file gives a new id (read only,
    so ``experiment --dry-run`` says what ``register`` would)."""
    return store.query("SELECT experiment_id FROM experiments WHERE name = ? AND experiment_id <> ? "
                       "ORDER BY created_at", [exp.name, exp.experiment_id])["experiment_id"].tolist()


def linked_runs(store: Store, experiment_id: str) -> dict[tuple[str, int], str]:
    df = store.query("SELECT variant, seed, run_id FROM experiment_runs WHERE experiment_id = ?", [experiment_id])
    return {(v, int(s)): r for v, s, r in df.itertuples(index=False)}


def _changed_inputs(recorded: dict[str, str] | None, inputs: dict[str, str]) -> list[str]:
    """Paths both fingerprint lists name, whose contents differ (an experiment recorded before fingerprints: none)."""
    return sorted(p for p, digest in (recorded or {}).items() if p in inputs and inputs[p] != digest)


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config, default=str))
    config.get("run", {}).pop("iterations", None)  # --iterations may extend a run beyond its snapshot
    return config


def _reusable(store: Store, name: str, config: RunConfig, inputs: dict[str, str]) -> str | None:
    """A run of the same name and config this (variant, seed) can use: one whose link a kill prevented (no
    experiment) first, else one an earlier version of the experiment file made (same name, linked to another id)
    from the same model and task contents (``inputs``): it computes exactly what this one would, so adding a
    variant to a file reruns nothing else."""
    df = store.query("SELECT run_id, config_json, run_id IN (SELECT run_id FROM experiment_runs) AS linked FROM runs "
                     "WHERE name = ? ORDER BY linked, created_at", [name])
    want = _comparable(config_to_dict(config))
    for run_id, text, _ in df.itertuples(index=False):
        owners = store.query("SELECT e.config_json FROM experiment_runs r JOIN experiments e "
                             "ON e.experiment_id = r.experiment_id WHERE r.run_id = ?", [run_id])["config_json"]
        if any(_changed_inputs(loads(j, {}).get("inputs"), inputs) for j in owners):
            continue
        try:  # read back as this engine reads it: fields added since the run was made take their defaults
            stored = config_to_dict(stored_config(loads(text, {})))
        except ConfigError:
            continue
        if _comparable(stored) == want:
            return run_id
    return None


def units_left(store: Store, run_id: str, iterations: int) -> int:
    return len(pending(store, run_id, run_config(store, run_id), iterations))


def plan_runs(store: Store | None, exp: Experiment, variants: list[str], seeds: list[int], iterations: int,
              use_job_files: bool = False, read_only: bool = False) -> list[PlannedRun]:
    """What to run, seed-major; writes nothing (see the module docstring). ``store`` None: a store not created yet,
    where every run is still to create; ``read_only``: job files are opened read-only (``--dry-run``)."""
    links = linked_runs(store, exp.experiment_id) if store is not None else {}
    inputs = exp.inputs()
    plans = []
    for seed in seeds:
        for variant in variants:
            name = exp.run_name(variant, seed)
            config = exp.run_config(variant, seed, iterations)
            run_id = links.get((variant, seed))
            linked = run_id is not None
            if store is not None and (run_id is None or store.get_run(run_id) is None):
                run_id, linked = _reusable(store, name, config, inputs), False
            found = job_file(store.path, run_id) if store is not None and run_id and use_job_files else None
            if found is not None and found.exists():
                # No worker holds it yet (StoreLockedError if a leftover one does).
                with Store(found, read_only=read_only) as job:
                    todo = pending(job, run_id, run_config(job, run_id), iterations)
            elif store is not None and run_id is not None:
                found, todo = None, pending(store, run_id, run_config(store, run_id), iterations)
            else:
                found, todo = None, [(t, stage) for t in range(iterations + 1) for stage in stages_of(t, config)]
            plans.append(PlannedRun(variant, seed, name, run_id, linked, len(todo), found, todo))
    return plans


def has_swap_table(store: Store, run_id: str, iterations: int) -> bool:
    """The run's stored swap table holds the cells of iteration 0 against ``iterations`` (``swap_finished``)."""
    from engine.swap import stored_swaps

    stored = stored_swaps(store, run_id, base=0, after=iterations)
    return bool(stored) and f"P{iterations}G0" in stored.get("cells", {}) and f"P0G{iterations}" in stored["cells"]


def ensure_run(store: Store, exp: Experiment, plan: PlannedRun, iterations: int) -> str:
    """The plan's run id, creating the run (``engine.loop.create_run``) and recording its link as needed."""
    if plan.run_id is None:
        plan.run_id = create_run(store, exp.run_config(plan.variant, plan.seed, iterations))
    else:  # an experiment extended with a larger --iterations: the run records how far it now goes
        extend_iterations(store, plan.run_id, iterations)
    if not plan.linked:
        store.write("experiment_runs", [{"experiment_id": exp.experiment_id, "variant": plan.variant,
                                          "seed": plan.seed, "run_id": plan.run_id}])
        plan.linked = True
    return plan.run_id


def run_inprocess(store: Store, exp: Experiment, plans: list[PlannedRun], iterations: int, *,
                  on_start: OnRun = lambda name: None, on_unit: OnRun = lambda name: None,
                  should_stop: Callable[[], bool] = lambda: False) -> list[RunResult]:
    """Run ``plans`` one after the other in this process (see the module docstring)."""
    results = []
    for plan in plans:
        result = RunResult(plan.variant, plan.seed, plan.name, plan.run_id, "not started", 0.0)
        results.append(result)
        if plan.units == 0 and plan.run_id is not None:
            ensure_run(store, exp, plan, iterations)
            result.status = "already done"
            continue
        if should_stop():
            continue
        on_start(plan.name)
        started = time.perf_counter()
        try:
            result.run_id = ensure_run(store, exp, plan, iterations)

            def stage_finished(_t: int, _stage: str, status: str, name: str = plan.name) -> None:
                if status in ("done", "skipped"):
                    on_unit(name)

            result.status = run_loop(store, result.run_id, iterations=iterations, should_stop=should_stop,
                                     on_stage=stage_finished)
        except Exception as exc:  # reported with the run; the next run still runs
            result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
            print(f"error: run {plan.name} ({result.run_id}) failed:\n{traceback.format_exc(limit=8)}",
                  file=sys.stderr)
        finally:
            result.wall_s = time.perf_counter() - started
            gc.collect()  # the run's models go before the next run loads its own
    return results


def swap_finished(store: Store, exp: Experiment, seeds: list[int], iterations: int, *,
                  on_start: OnRun = lambda name: None,
                  should_stop: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
    """The swap tables of the finished runs of ``exp.swap``'s variants (see the module docstring)."""
    from engine.errors import StageStopped
    from engine.swap import swap_table

    links = linked_runs(store, exp.experiment_id)
    done = []
    for seed in seeds:
        for variant in exp.swap:
            run_id = links.get((variant, seed))
            if run_id is None or should_stop() or units_left(store, run_id, iterations):
                continue
            if has_swap_table(store, run_id, iterations):
                continue
            on_start(f"swap {exp.run_name(variant, seed)}")
            try:
                table = swap_table(store, run_id, base=0, after=iterations, should_stop=should_stop)
            except StageStopped:
                break
            done.append({"variant": variant, "seed": seed, "run_id": run_id, "seconds": table["seconds"]})
    return done

