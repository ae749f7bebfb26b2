"""Stage ``sample``: the iteration's planner samples K plans per training task (or per planning step).

Onetime: K complete plans per task. Iterative: for each step s of the gold plan, K candidate next turns given the
gold history (gold subgoals 1..s-1 and their executed results). Writes ``plans`` rows in task batches, one
transaction per batch; a resumed stage skips the batches whose tasks already have plans. ``sample.backend`` picks
the generator (``hf``: the in-memory planner; ``vllm``: a vLLM engine on the planner checkpoint, see
engine/vllm_backend.py). The hf kernel is ``sample.shared_prefill``, or with ``sample.calibrate`` the faster of the
two on the stage's first batch, timed and kept per model and machine in ``<run.workdir>/kernel_choices.json``
(``engine.kernel_cache``; ``sample.recalibrate`` times again); the stage's counts name it (``kernel``).
"""

from __future__ import annotations

import json

from engine import generation, kernel_cache
from engine.formats.lumos import parse_planner_turn
from engine.generators import generator_for
from engine.outcome import gold_step_results
from engine.stages.context import StageContext, batches, pending_batches
from engine.tasks import Task
from engine.turns import planner_step_prompt, read_plan


def planning_units(ctx: StageContext, tasks: list[Task]) -> list[tuple[Task, int, str]]:
    """``(task, step, planner prompt)``: one unit per task (step 0) or per gold planning step (1..n)."""
    planner = ctx.agent("planner")
    # One layout (engine.turns.planner_step_messages) for the prompt stored here, which DPO trains on, and for the
    # messages the conversational pairs export writes.
    if ctx.config.sample.formulation == "onetime":
        return [(t, 0, planner_step_prompt(planner, t, 0, [])) for t in tasks]
    units = []
    for task in tasks:
        results = gold_step_results(task)
        units += [(task, s, planner_step_prompt(planner, task, s, results))
                  for s in range(1, len(task.gold_subgoals) + 1)]
    return units


def read_turn(text: str, formulation: str) -> tuple[list[str], bool]:
    if formulation == "onetime":
        return read_plan(text)
    try:
        parsed = parse_planner_turn(text.strip())
    except ValueError:
        return [], False
    return ([parsed[1].strip()], True) if parsed else ([], False)


def run(ctx: StageContext) -> dict[str, int | str]:
    cfg = ctx.config.sample
    done = ctx.store.keys_done("plans", ctx.run_id, ctx.iteration, ("task_id",))
    units = planning_units(ctx, ctx.train_tasks())
    planner = ctx.agent("planner")
    gen = generation.GenerationConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                      num_return_sequences=cfg.k, batch_size=cfg.batch_size)
    written = 0
    # Batches hold whole tasks so that "task has plans" means "task is done" on resume; they are cut from all the
    # iteration's tasks, so a resumed stage samples each batch with the seed an uninterrupted run used.
    by_task: dict[str, list[tuple[Task, int, str]]] = {}
    for unit in units:
        by_task.setdefault(unit[0].id, []).append(unit)
    task_batches = pending_batches(list(by_task.values()), max(1, cfg.batch_size), lambda u: (u[0][0].id,) in done)
    n_batches = len(batches(list(by_task), max(1, cfg.batch_size)))
    if not task_batches:  # resumed with nothing left: do not start a (vLLM) engine for nothing
        return {"rows": ctx.store.count("plans", ctx.run_id, ctx.iteration), "new_rows": 0}
    generator = generator_for(cfg.backend, planner, ctx.agent_path("planner", ctx.iteration),
                              field="sample.backend", dtype=ctx.config.planner.dtype, options=ctx.config.vllm,
                              shared_prefill=cfg.shared_prefill)
    calibrate = cfg.calibrate and cfg.backend == "hf"
    kernel = _kernel_name(cfg.shared_prefill) if cfg.backend == "hf" else cfg.backend
    choices = kernel_cache.for_workdir(ctx.config.run.workdir)
    key = kernel_cache.choice_key("sample", planner.model, batch_size=cfg.batch_size, k=cfg.k,
                                  max_new_tokens=cfg.max_new_tokens) if calibrate else ""
    known = choices.get(key) if calibrate and not cfg.recalibrate else None
    if known:  # measured before on this model and machine: no second timing
        calibrate, generator.shared_prefill = False, known["fast"]
        kernel = (f"{_kernel_name(known['fast'])} (calibrated before on this model and machine: shared prefill "
                  f"{known['seconds']['shared_prefill']:.2f} s, one batched call "
                  f"{known['seconds']['one_batched_call']:.2f} s; {choices.path})")
    try:
        for index, group in task_batches:
            ctx.check_stop()
            flat = [u for task_units in group for u in task_units]
            seed = ctx.config.run.seed * 100_003 + ctx.iteration * 1_009 + index
            if calibrate:  # the first batch, sampled by both kernels with the same seed, timed side by side
                outputs, generator.shared_prefill, kernel, seconds = _calibrate(generator, [u[2] for u in flat],
                                                                                 gen, seed)
                choices.put(key, generator.shared_prefill, seconds)
                calibrate = False
            else:
                outputs = generator.generate([u[2] for u in flat], gen, seed=seed)
            rows = []
            for (task, step, prompt), texts in zip(flat, outputs):
                for k, text in enumerate(texts):
                    subgoals, well_formed = read_turn(text, cfg.formulation)
                    rows.append({"run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": task.id, "step": step,
                                 "k": k, "prompt": prompt, "text": text, "subgoals_json": json.dumps(subgoals),
                                 "well_formed": well_formed})
            written += ctx.store.write("plans", rows)
            # The iteration's stored rows, as done/total counts every batch: this job's own count went backwards
            # after a resume (3/6 with 720 plans kept, then "4/6 ... 240 plans").
            ctx.report(index + 1, n_batches, f"{ctx.store.count('plans', ctx.run_id, ctx.iteration)} plans")
    finally:
        generator.close()  # a vLLM engine's GPU memory goes back before the next stage
    return {"rows": ctx.store.count("plans", ctx.run_id, ctx.iteration), "new_rows": written, "kernel": kernel}


def _kernel_name(shared_prefill: bool) -> str:
    return "shared prefill" if shared_prefill else "one batched call"


def _calibrate(generator, prompts: list[str], gen: generation.GenerationConfig, seed: int
               ) -> tuple[list[list[str]], bool, str, dict[str, float]]:
    """``sample.calibrate``: sample one batch with each hf kernel (same seed) and keep the faster; returns the
    faster kernel's outputs (so the rows written are what that kernel samples), its flag, the counts' line and
    both times."""
    import time

    seconds, outputs = {}, {}
    for shared in (True, False):
        generator.shared_prefill = shared
        started = time.perf_counter()
        outputs[shared] = generator.generate(prompts, gen, seed=seed)
        seconds[shared] = time.perf_counter() - started
    fast = seconds[True] <= seconds[False]
    same = "same texts" if outputs[True] == outputs[False] else "texts differ"
    return outputs[fast], fast, (f"{_kernel_name(fast)} (calibrated on {len(prompts)} prompts: shared prefill "
                                 f"{seconds[True]:.2f} s, one batched call {seconds[False]:.2f} s; {same})"), {
        "shared_prefill": seconds[True], "one_batched_call": seconds[False]}
