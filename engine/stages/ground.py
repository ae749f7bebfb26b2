"""Stage ``ground``: the iteration's grounder writes actions for the sampled plans; the executor runs them.

Only the plans the critic will judge are grounded (``engine.ranking.select``): ``ground.which`` = ``best`` (the
lowest-PPL plan per task-step, the paper's choice), ``top_n`` (the ``ground.top_n`` best distinct plans),
``best_worst`` (the lowest- and the highest-PPL distinct plan) or ``all`` distinct plans; a plan text sampled
several times is grounded once, under its lowest k. Each grounding is executed with the task's tools and judged
against the gold answer (iterative: the step's result against the gold step's result). Rows go to ``groundings``; a
resumed stage skips the chunks whose plans all have one. ``ground.backend`` picks the generator (``hf``: the
in-memory grounder; ``vllm``: a vLLM engine on the grounder checkpoint, see engine/vllm_backend.py).
"""

from __future__ import annotations

import json
from typing import Any

from engine import generation
from engine.generators import generator_for
from engine.outcome import (
    Toolbox,
    gold_step_results,
    is_solved,
    run_grounding,
    step_matches,
    step_result,
    toolbox_for,
)
from engine.ranking import Candidate, select
from engine.stages.context import StageContext, batches, pending_batches
from engine.tasks import Task
from engine.turns import grounding_pair, plan_subgoals


def plans_to_ground(ctx: StageContext) -> list[Any]:
    """The selected plans (rows of ``plans`` with their ``logppl``), ordered by task, step and k."""
    frame = ctx.store.query(
        "SELECT p.*, s.logppl FROM plans p JOIN scores s USING (run_id, iteration, task_id, step, k) "
        "WHERE p.run_id = ? AND p.iteration = ? ORDER BY p.task_id, p.step, p.k", [ctx.run_id, ctx.iteration])
    cfg = ctx.config.ground
    chosen = []
    for _, group in frame.groupby(["task_id", "step"], sort=True):
        rows = {int(r.k): r for r in group.itertuples(index=False)}
        picked = select([Candidate(k, r.text, float(r.logppl)) for k, r in rows.items()], cfg.which, cfg.top_n)
        chosen += [rows[c.k] for c in sorted(picked, key=lambda c: c.k)]
    return chosen


def judge(task: Task, step: int, actions: str, results: list[str], toolbox: Toolbox | None = None
          ) -> tuple[dict, bool]:
    """Execute a grounding; ``(execution dict, correct)``. Iterative steps run after the gold history."""
    result = run_grounding(task, step, actions, toolbox)
    if step == 0:
        return result.to_dict(), is_solved(task, result)
    got, want = step_result(result, actions), results[step - 1]
    return result.to_dict(), result.ok and step_matches(task, got, want)


def run(ctx: StageContext) -> dict[str, int]:
    cfg = ctx.config.ground
    rows_in = plans_to_ground(ctx)
    done = ctx.store.keys_done("groundings", ctx.run_id, ctx.iteration, ("task_id", "step", "k"))
    grounder = ctx.agent("grounder")
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    gold_results = {}
    toolbox = toolbox_for(ctx.config.tools)
    gen = generation.GenerationConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                      batch_size=cfg.batch_size)
    written = 0
    # Chunks are cut from all the plans, so a resumed stage grounds each chunk with the seed (and the shared
    # identical-plan generations) of an uninterrupted run.
    chunks = pending_batches(rows_in, cfg.batch_size * 4, lambda r: (r.task_id, r.step, r.k) in done)
    n_chunks = len(batches(rows_in, cfg.batch_size * 4))
    if not chunks:  # resumed with nothing left: do not start a (vLLM) engine for nothing
        return {"rows": ctx.store.count("groundings", ctx.run_id, ctx.iteration), "new_rows": 0}
    generator = generator_for(cfg.backend, grounder, ctx.agent_path("grounder", ctx.iteration),
                              field="ground.backend", dtype=ctx.config.grounder.dtype, options=ctx.config.vllm)
    try:
        for index, chunk in chunks:
            ctx.check_stop()
            prompts_by_row = []
            for row in chunk:
                task = tasks[row.task_id]
                if row.step and task.id not in gold_results:
                    gold_results[task.id] = gold_step_results(task)
                subgoals = plan_subgoals(json.loads(row.subgoals_json), row.text)
                prompts_by_row.append(grounding_pair(grounder, task, row.step, subgoals,
                                                     gold_results.get(task.id, []))[0])
            unique = list(dict.fromkeys(prompts_by_row))  # identical plans -> one generation
            seed = ctx.config.run.seed * 100_003 + ctx.iteration * 1_009 + 500 + index
            generated = dict(zip(unique, (o[0] for o in generator.generate(unique, gen, seed=seed))))
            rows = []
            for row, prompt in zip(chunk, prompts_by_row):
                task, actions = tasks[row.task_id], generated[prompt]
                execution, correct = judge(task, row.step, actions, gold_results.get(task.id, []), toolbox)
                rows.append({"run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": row.task_id,
                             "step": row.step, "k": row.k, "prompt": prompt, "actions": actions,
                             "ok": execution["ok"],
                             "values_json": json.dumps(execution["values"], ensure_ascii=False),
                             "answer": execution["answer"], "correct": correct, "error": execution["error"]})
            written += ctx.store.write("groundings", rows)
            ctx.report(index + 1, n_chunks, f"{written} groundings")
    finally:
        generator.close()  # a vLLM engine's GPU memory goes back before the next stage
    return {"rows": ctx.store.count("groundings", ctx.run_id, ctx.iteration), "new_rows": written}
