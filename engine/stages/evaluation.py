"""Stage ``evaluate``: the agents an iteration produced, end to end on the held-in and held-out splits.

Iteration t evaluates pi_p(t+1), pi_g(t+1) (iteration 0: the starting agents) on the same seeded task sample every
iteration, so the figures are comparable; writes ``metrics`` (per split and domain, plus "all") and
``eval_traces`` (one row per task) together, in one transaction that replaces the iteration's previous ones.
"""

from __future__ import annotations

import json

from engine.evaluate import evaluate
from engine.outcome import toolbox_for
from engine.runtime import pick_eval_tasks
from engine.stages.context import StageContext


def run(ctx: StageContext) -> dict[str, int]:
    cfg = ctx.config
    tasks = pick_eval_tasks(ctx.store.get_tasks(ctx.run_id), cfg.evaluate.splits, cfg.data.eval_limit,
                            cfg.data.eval_seed)
    planner = ctx.agent("planner", iteration=ctx.iteration + 1)
    grounder = ctx.agent("grounder", iteration=ctx.iteration + 1)
    ctx.check_stop()
    ctx.report(0, len(tasks), "planning and grounding")
    metrics, traces = evaluate(planner, grounder, tasks, cfg.evaluate, toolbox=toolbox_for(cfg.tools))
    rows = [{"run_id": ctx.run_id, "iteration": ctx.iteration, "split": split, "domain": domain, "name": name,
             "value": float(value)}
            for split, domains in metrics.items() for domain, values in domains.items()
            for name, value in values.items()]
    traces = [{"run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": t.task_id, "split": t.split,
               "domain": t.domain, "plan": t.plan, "actions": t.actions, "answer": t.answer, "correct": t.correct,
               "gold_logppl": t.gold_logppl, "trace_json": json.dumps(t.to_dict(), ensure_ascii=False)}
              for t in traces]
    # Metrics and traces replace the iteration's old ones in one transaction: a kill never leaves one without the
    # other, and a re-run with other limits leaves no stale rows.
    where = {"run_id": ctx.run_id, "iteration": ctx.iteration}
    ctx.store.write_batch([("metrics", rows), ("eval_traces", traces)],
                          deletes=[("metrics", where), ("eval_traces", where)])
    ctx.report(len(tasks), len(tasks), "done")
    return {"rows": len(traces), "metrics": len(rows)}
