"""``experiment --dry-run``: what one ``python -m engine experiment`` command would do, without doing it.

``describe(store, exp, plans, seeds, iterations) -> dict`` reads the plans of ``engine.runner.plan_runs`` (and the
store, None when it does not exist yet) and writes nothing. It returns:

- ``runs``: for each planned (variant, seed), in the order they would run, its ``action`` -- ``create`` (no run yet),
  ``resume`` (a run with stages left: interrupted, or extended by a larger ``--iterations``) or ``skip`` (finished) --
  with its ``run_id`` and the ``units`` ((iteration, stage) pairs) left;
- ``units``: their total; ``swaps``: how many swap tables the command would compute afterwards (finished runs of
  ``exp.swap``'s variants without a stored table; a run of a variant ``--variants`` leaves out is judged by its job
  file when the command runs in-process, which absorbs every job file first, and by the store under ``--jobs N``);
- ``estimate_s``: the stage time left, each unit costed at the median duration of its stage (at iteration 0, or at
  later iterations) among the done stages of this experiment's runs, else of every run in the store
  (``estimate_from`` says which, and how many stages the medians rest on); a run's stages are read where the command
  would read them: from its job file when ``engine.jobs`` left one (a killed ``--jobs N`` command leaves the newest
  rows there, and the main store may record none of them), else from the store; a stage the variant leaves out
  (``engine.loop.is_skipped``) costs nothing. Units with no such recorded duration are counted in ``unestimated`` and
  left out of the sum, so the estimate is then a floor. None when neither the store nor a job file
  has a done stage to go by.

The estimate is stage time summed over runs, as ``report``'s ``wall_s.total``: runs side by side under ``--jobs N``
overlap, and how much that gains depends on the cores, so no wall time is promised. Swap tables record no times and
are not in it. Iteration 0 is costed apart because an evaluation ``evaluate.reuse`` finds in the cache takes a
second: in a store holding one run, the first of an experiment's runs, its median is the computed evaluation, so the
estimate of the other runs' iteration 0 is high until some of them have read the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from engine.experiment import Experiment
from engine.loop import is_skipped
from engine.runner import PlannedRun, has_swap_table, job_file, linked_runs, units_left
from engine.schedule import iteration_config
from engine.store import Store

Medians = dict[tuple[str, bool], float]  # (stage, at iteration 0?) -> median seconds


# One row per done stage: its run, stage, whether at iteration 0, and its seconds (every span: ``earlier_s``).
DONE_STAGE_SECONDS = (
    "SELECT run_id, stage, iteration = 0 AS initial, "
    "date_diff('millisecond', started_at, finished_at) / 1000.0 + coalesce(earlier_s, 0) AS s "
    "FROM stages WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL")


def own_runs(store: Store, experiment_id: str, plans: list[PlannedRun]) -> set[str]:
    """The experiment's runs: linked to it, or about to be adopted by one of ``plans`` (a run a kill left
    unlinked, or one an earlier version of the file made: ``engine.runner.plan_runs``)."""
    return {*linked_runs(store, experiment_id).values(), *(p.run_id for p in plans if p.run_id)}


def job_files_of(store: Store, run_ids: set[str]) -> dict[str, Path]:
    """``{run_id: job file}`` for those of ``run_ids`` that ``engine.jobs`` left a job file for: what the command
    absorbs first (``--jobs 1``) or resumes in place (``--jobs N``)."""
    found = {run_id: job_file(store.path, run_id) for run_id in run_ids}
    return {run_id: path for run_id, path in found.items() if path.exists()}


def done_stage_seconds(store: Store, job_files: dict[str, Path]) -> pd.DataFrame:
    """Every done stage's seconds (``DONE_STAGE_SECONDS``), a run with a job file read from it instead of the store:
    the job file holds the run's newest rows, which replace the store's when merged (``engine.jobs.merge``)."""
    in_store = store.query(DONE_STAGE_SECONDS)
    frames = [in_store[~in_store["run_id"].isin(list(job_files))]]
    for run_id, path in job_files.items():
        with Store(path, read_only=True) as job:
            frames.append(job.query(f"{DONE_STAGE_SECONDS} AND run_id = ?", [run_id]))
    found = [frame for frame in frames if len(frame)]  # pandas warns about concatenating empty frames
    return pd.concat(found, ignore_index=True) if found else in_store.iloc[0:0]


def stage_medians(store: Store, experiment_id: str, plans: list[PlannedRun] | None = None) -> tuple[Medians, str]:
    """``({(stage, at iteration 0?): median seconds}, where they come from)``: the done stages of the experiment's
    runs (linked, or adopted by ``plans``), else every run's, each run read from its job file when it has one.
    Iteration 0 has medians of its own: its evaluation is the one ``evaluate.reuse`` usually reads from the cache
    (every run of an experiment starts from the same agents), so it costs far less than a later one."""
    ours = own_runs(store, experiment_id, plans or [])
    seconds = done_stage_seconds(store, job_files_of(store, ours))
    own = seconds[seconds["run_id"].isin(list(ours))]
    if len(own):
        return _medians(own), f"{len(own)} done stages of this experiment"
    if len(seconds):
        return _medians(seconds), f"{len(seconds)} done stages of other runs in this store"
    return {}, "no done stage in this store"


def _medians(df: pd.DataFrame) -> Medians:
    grouped = df.astype({"s": float}).groupby(["stage", "initial"])["s"].median()
    return {(str(stage), bool(initial)): float(s) for (stage, initial), s in grouped.items()}


def _swaps_left(store: Store | None, exp: Experiment, plans: list[PlannedRun], seeds: list[int],
                iterations: int, absorbs: bool = False) -> int:
    """Swap tables ``engine.runner.swap_finished`` would compute once the planned runs are done. ``absorbs``: the
    command runs in-process (``--jobs 1``) and merges every job file of the experiment's runs first, those of
    variants ``--variants`` leaves out included, so such a run is judged by its job file; ``--jobs N`` leaves their
    job files alone and judges them by the store."""
    planned = {(p.variant, p.seed): p for p in plans}
    links = linked_runs(store, exp.experiment_id) if store is not None else {}
    count = 0
    for seed in seeds:
        for variant in exp.swap:
            plan = planned.get((variant, seed))
            run_id = plan.run_id if plan else links.get((variant, seed))
            if run_id is None or store is None:
                count += plan is not None  # a run this command creates: its table too, once it is done
                continue
            path = job_file(store.path, run_id)
            if plan is None and absorbs and path.exists():
                with Store(path, read_only=True) as job:
                    if not units_left(job, run_id, iterations) and not has_swap_table(job, run_id, iterations):
                        count += 1
                continue
            if plan is None and units_left(store, run_id, iterations):
                continue  # not run by this command, and not finished: no table yet
            if not has_swap_table(store, run_id, iterations):
                count += 1
    return count


def describe(store: Store | None, exp: Experiment, plans: list[PlannedRun], seeds: list[int],
             iterations: int, absorbs: bool = False) -> dict[str, Any]:
    """What the command would do (see the module docstring); ``absorbs``: it runs in-process (``--jobs 1``)."""
    medians, source = stage_medians(store, exp.experiment_id, plans) if store is not None else ({}, "no store yet")
    runs, estimate, unestimated = [], 0.0, 0
    for plan in plans:
        action = "skip" if plan.units == 0 else "create" if plan.run_id is None else "resume"
        runs.append({"name": plan.name, "variant": plan.variant, "seed": plan.seed, "run_id": plan.run_id,
                     "action": action, "units": plan.units})
        config = exp.run_config(plan.variant, plan.seed, iterations)  # a reused run's config equals it
        for t, stage in plan.todo:
            # Left out by the variant or by the iteration's phase: recorded as skipped, in no time.
            if is_skipped(stage, iteration_config(config, t), t):
                continue
            if (stage, t == 0) in medians:
                estimate += medians[(stage, t == 0)]
            else:
                unestimated += 1
    units = sum(plan.units for plan in plans)
    return {"experiment": exp.experiment_id, "name": exp.name, "dry_run": True, "runs": runs, "units": units,
            "swaps": _swaps_left(store, exp, plans, seeds, iterations, absorbs),
            "estimate_s": round(estimate, 1) if medians else None, "estimate_from": source,
            "unestimated": unestimated if medians else units}
