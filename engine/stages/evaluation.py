"""Stage ``evaluate``: the agents an iteration produced, end to end on the held-in and held-out splits.

Iteration t evaluates pi_p(t+1), pi_g(t+1) (iteration 0: the starting agents) on the same seeded task sample every
iteration, so the figures are comparable; writes ``metrics`` (per split and domain, plus "all") and
``eval_traces`` (one row per task) together, in one transaction that replaces the iteration's previous ones.

With ``evaluate.reuse`` (the default) an evaluation already computed -- by any run sharing ``run.workdir`` -- for the
same agent files, tasks, settings, software, threads and hardware (``engine.eval_cache``) is copied instead of
recomputed, without loading the agents; the stage's counts name the run and iteration it came from. Every run of an
experiment starts from the same agents, so only the first evaluates iteration 0. A stop request (the studio's Stop, a
first Ctrl-C) is honoured between generation and scoring batches (``engine.stop_check``): the stage records
``stopped`` and nothing else, and a resume evaluates again.
"""

from __future__ import annotations

from typing import Any

from engine import eval_cache
from engine.eval_cache import StoredEvaluation, evaluation_key
from engine.evaluate import evaluate
from engine.outcome import toolbox_for
from engine.runtime import pick_eval_tasks
from engine.stages.context import StageContext
from engine.stop_check import stop_checked


def run(ctx: StageContext) -> dict[str, Any]:
    cfg = ctx.config
    tasks = pick_eval_tasks(ctx.store.get_tasks(ctx.run_id), cfg.evaluate.splits, cfg.data.eval_limit,
                            cfg.data.eval_seed)
    paths = {role: ctx.agent_path(role, ctx.iteration + 1) for role in ("planner", "grounder")}
    key, not_reusable = (evaluation_key(cfg, paths["planner"], paths["grounder"], tasks) if cfg.evaluate.reuse
                         else (None, "evaluate.reuse = false"))
    cache = eval_cache.for_workdir(cfg.run.workdir)
    stored = cache.get(key) if key else None
    ctx.check_stop()
    if stored is not None:
        ctx.report(0, len(tasks), f"reusing the evaluation of run {stored.origin()}")
        origin = {"reused_from": stored.origin(), "evaluation_key": key[:16]}
    else:
        planner = ctx.agent("planner", iteration=ctx.iteration + 1)
        grounder = ctx.agent("grounder", iteration=ctx.iteration + 1)
        ctx.report(0, len(tasks), "planning and grounding")
        # A stop request is honoured between generation and scoring batches: the evaluation records nothing until
        # it returns, so a Stop waited for all of it (engine.stop_check); a resume evaluates again.
        with stop_checked(ctx.check_stop):
            metrics, traces = evaluate(planner, grounder, tasks, cfg.evaluate, toolbox=toolbox_for(cfg.tools))
        stored = StoredEvaluation.from_traces(metrics, traces, ctx.run_id, ctx.iteration)
        origin = {"evaluation_key": key[:16]} if key else {"not_reusable": not_reusable}
    where = {"run_id": ctx.run_id, "iteration": ctx.iteration}
    rows = [{**where, **row} for row in stored.metrics]
    trace_rows = [{**where, **row} for row in stored.traces]
    # Metrics and traces replace the iteration's old ones in one transaction: a kill never leaves one without the
    # other, and a re-run with other limits leaves no stale rows.
    ctx.store.write_batch([("metrics", rows), ("eval_traces", trace_rows)],
                          deletes=[("metrics", where), ("eval_traces", where)])
    if key and "reused_from" not in origin:
        try:
            cache.put(key, stored)  # after the store has it: a cache entry never precedes the rows it came from
        except OSError as exc:  # a read-only or full workdir costs later runs the evaluation, not this run its rows
            origin["not_kept"] = f"{cache.directory}: {exc.strerror or exc}"
    ctx.report(len(tasks), len(tasks), "done")
    return {"rows": len(trace_rows), "metrics": len(rows), **origin}
