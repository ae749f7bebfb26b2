"""``experiment --dry-run``: what one ``python -m engine experiment`` command would do, without doing it.

``describe(store, exp, plans, seeds, iterations) -> dict`` reads the plans of ``engine.runner.plan_runs`` (and the
store, None when it does not exist yet) and writes nothing. It returns:

- ``runs``: for each planned (variant, seed), in the order they would run, its ``action`` -- ``create`` (no run yet),
  ``resume`` (a run with stages left: interrupted, or extended by a larger ``--iterations``) or ``skip`` (finished) --
  with its ``run_id`` and the ``units`` ((iteration, stage) pairs) left;
- ``units``: their total; ``swaps``: how many swap tables the command would compute afterwards (finished runs of
  ``exp.swap``'s variants without a stored table);
- ``estimate_s``: the stage time left, each unit costed at the median duration of its stage (at iteration 0, or at
  later iterations) among the done stages of this experiment's runs, else of every run in the store
  (``estimate_from`` says which, and how many stages the medians rest on); a stage the variant leaves out
  (``engine.loop.is_skipped``) costs nothing. Units with no such recorded duration are counted in ``unestimated`` and
  left out of the sum, so the estimate is then a floor. None when the store has no done stage to go by.

The estimate is stage time summed over runs, as ``report``'s ``wall_s.total``: runs side by side under ``--jobs N``
overlap, and how much that gains depends on the cores, so no wall time is promised. Swap tables record no times and
are not in it. Iteration 0 is costed apart because an evaluation ``evaluate.reuse`` finds in the cache takes a
second: in a store holding one run, the first of an experiment's runs, its median is the computed evaluation, so the
estimate of the other runs' iteration 0 is high until some of them have read the cache.
"""

from __future__ import annotations

from typing import Any

from engine.experiment import Experiment
from engine.loop import is_skipped
from engine.runner import PlannedRun, has_swap_table, linked_runs, units_left
from engine.schedule import iteration_config
from engine.store import Store

Medians = dict[tuple[str, bool], float]  # (stage, at iteration 0?) -> median seconds


def stage_medians(store: Store, experiment_id: str) -> tuple[Medians, str]:
    """``({(stage, at iteration 0?): median seconds}, where they come from)``: the experiment's own done stages, else
    every run's. Iteration 0 has medians of its own: its evaluation is the one ``evaluate.reuse`` usually reads
    from the cache (every run of an experiment starts from the same agents), so it costs far less than a later one."""
    query = ("SELECT stage, iteration = 0 AS initial, "
             "median(date_diff('millisecond', started_at, finished_at) / 1000.0 + coalesce(earlier_s, 0)) AS s, "
             "count(*) AS n "
             "FROM stages WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL {where} "
             "GROUP BY ALL")
    own = store.query(query.format(where="AND run_id IN (SELECT run_id FROM experiment_runs WHERE experiment_id = ?)"),
                      [experiment_id])
    if len(own):
        return _medians(own), f"{int(own['n'].sum())} done stages of this experiment"
    every = store.query(query.format(where=""))
    if len(every):
        return _medians(every), f"{int(every['n'].sum())} done stages of other runs in this store"
    return {}, "no done stage in this store"


def _medians(df) -> Medians:
    return {(str(stage), bool(initial)): float(s) for stage, initial, s in df[["stage", "initial", "s"]].itertuples(
        index=False)}


def _swaps_left(store: Store | None, exp: Experiment, plans: list[PlannedRun], seeds: list[int],
                iterations: int) -> int:
    """Swap tables ``engine.runner.swap_finished`` would compute once the planned runs are done."""
    planned = {(p.variant, p.seed): p for p in plans}
    links = linked_runs(store, exp.experiment_id) if store is not None else {}
    count = 0
    for seed in seeds:
        for variant in exp.swap:
            plan = planned.get((variant, seed))
            run_id = plan.run_id if plan else links.get((variant, seed))
            if plan is None and (run_id is None or units_left(store, run_id, iterations)):
                continue  # not run by this command, and not finished: no table yet
            if run_id is None or store is None or not has_swap_table(store, run_id, iterations):
                count += 1
    return count


def describe(store: Store | None, exp: Experiment, plans: list[PlannedRun], seeds: list[int],
             iterations: int) -> dict[str, Any]:
    """What the command would do (see the module docstring)."""
    medians, source = stage_medians(store, exp.experiment_id) if store is not None else ({}, "no store yet")
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
            "swaps": _swaps_left(store, exp, plans, seeds, iterations),
            "estimate_s": round(estimate, 1) if medians else None, "estimate_from": source,
            "unestimated": unestimated if medians else units}
