"""Stage ``score``: the iteration's grounder scores every sampled plan by the perplexity of the gold actions.

log-PPL = mean NLL of the gold action tokens plus EOS given the grounder prompt with that plan (prompt masked;
each task's shared prompt prefix is computed once when ``score.shared_prefix``, and batched or shared scoring
equals unbatched, see ``engine.scoring.score_targets``). With ``score.calibrate`` the first chunk is scored by both
kernels and the faster one scores the rest; the choice is kept per model and machine in
``<run.workdir>/kernel_choices.json`` (``engine.kernel_cache``) and reused by later stage runs unless
``score.recalibrate``. The stage's counts name the kernel either way. A
malformed plan is scored with its raw text as the single subgoal, so it still gets a (typically bad) score instead
of vanishing from the pairs.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from engine import kernel_cache, scoring
from engine.outcome import gold_step_results
from engine.stages.context import StageContext, batches, pending_batches
from engine.turns import grounding_pair, plan_subgoals


def run(ctx: StageContext) -> dict[str, int]:
    plans = ctx.store.frame("plans", ctx.run_id, ctx.iteration)
    scored = ctx.store.keys_done("scores", ctx.run_id, ctx.iteration, ("task_id", "step", "k"))
    rows = list(plans.itertuples(index=False))
    grounder = ctx.agent("grounder")
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    results_cache: dict[str, list[str]] = {}
    written = 0
    # A transaction per chunk of plans. Chunks are cut from all plans, so a resumed stage scores each plan in the
    # same batch (same padding, same float rounding) as an uninterrupted run.
    size = max(ctx.config.score.batch_size * 8, 64)
    chunks = pending_batches(rows, size, lambda r: (r.task_id, r.step, r.k) in scored)
    n_chunks = len(batches(rows, size))
    fast: bool | None = ctx.config.score.shared_prefix
    kernel = _kernel_name(fast)
    choices, key = kernel_cache.for_workdir(ctx.config.run.workdir), ""
    if ctx.config.score.calibrate:
        key = kernel_cache.choice_key("score", grounder.model, batch_size=ctx.config.score.batch_size)
        known = None if ctx.config.score.recalibrate else choices.get(key)
        fast = known["fast"] if known else None  # None: measured on the first chunk below
        if known:
            kernel = (f"{_kernel_name(fast)} (calibrated before on this model and machine: shared prefix "
                      f"{known['seconds']['shared_prefix']:.2f} s, padded batches "
                      f"{known['seconds']['padded_batches']:.2f} s; {choices.path})")
    for index, chunk in chunks:
        ctx.check_stop()
        pairs = []
        for row in chunk:
            task = tasks[row.task_id]
            subgoals = plan_subgoals(json.loads(row.subgoals_json), row.text)
            if row.step and task.id not in results_cache:
                results_cache[task.id] = gold_step_results(task)
            pairs.append(grounding_pair(grounder, task, row.step, subgoals, results_cache.get(task.id, [])))
        prompts, targets = [p for p, _ in pairs], [t for _, t in pairs]
        if fast is None:  # score.calibrate: the first chunk is scored by both kernels, timed side by side
            fast, kernel, seconds = _calibrate(grounder, prompts, targets, ctx.config.score.batch_size)
            choices.put(key, fast, seconds)
        logppl = scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets,
                                       batch_size=ctx.config.score.batch_size, fast=fast)
        n_tokens = [len(grounder.tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for _, t in pairs]
        frame = pd.DataFrame({
            "run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": [r.task_id for r in chunk],
            "step": [r.step for r in chunk], "k": [r.k for r in chunk], "logppl": logppl,
            "ppl": [math.exp(min(v, 700.0)) for v in logppl], "n_tokens": n_tokens,
        })
        written += ctx.store.write("scores", frame)
        # The iteration's stored scores, as done/total counts every chunk (not only this job's: see stages.sample).
        ctx.report(index + 1, n_chunks, f"{ctx.store.count('scores', ctx.run_id, ctx.iteration)} plans scored")
    return {"rows": ctx.store.count("scores", ctx.run_id, ctx.iteration), "new_rows": written, "kernel": kernel}


def _kernel_name(fast: bool) -> str:
    return "shared prefix" if fast else "padded batches"


def _calibrate(grounder, prompts: list[str], targets: list[str], batch_size: int
               ) -> tuple[bool, str, dict[str, float]]:
    """Score one chunk with each kernel and keep the faster (``score.calibrate``); the two agree to ~1e-6. Returns
    the choice, the counts' line and both times."""
    import time

    seconds = {}
    for fast in (True, False):
        started = time.perf_counter()
        scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets, batch_size=batch_size, fast=fast)
        seconds[fast] = time.perf_counter() - started
    fast = seconds[True] <= seconds[False]
    return fast, (f"{_kernel_name(fast)} (calibrated on {len(prompts)} plans: shared "
                  f"prefix {seconds[True]:.2f} s, padded batches {seconds[False]:.2f} s)"), {
        "shared_prefix": seconds[True], "padded_batches": seconds[False]}
