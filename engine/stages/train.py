"""Stages ``train_planner`` (DPO on the effective pairs) and ``train_grounder`` (SFT on critic-checked groundings).

Both train a fresh copy of the iteration's starting agent with TRL, log every TRL log line into ``train_logs``,
honour the stop flag after each optimizer step, and save the result as the iteration's checkpoint
(``run_dir/iter_TT/<role>``: full weights; a LoRA run saves its adapter alone with the model it was trained on,
loaded back as that model plus the adapters in order, or with ``save_adapter = false`` merges it into full
weights). With nothing to train on they
record the starting checkpoint unchanged, so the next iteration always has a planner and a grounder.

Crash safety (``engine.stages.checkpoints``, shared with the GRPO and warm-start stages): a checkpoint is written to
``<role>.partial-<pid>`` and renamed into place when complete, and its row is stored after that, so a recorded
checkpoint is always whole. Every (re-)run first discards what an earlier
attempt left (the directories, the row and its log lines) and trains from the start; training keeps no intermediate
checkpoints (a stage's training is short next to the rest of an iteration), so a killed training stage restarts
cleanly.

``launch.mode = "accelerate"`` trains in an ``accelerate launch`` subprocess instead (engine/launch.py and
engine/train_worker.py: same rows, settings, seed, reference rule and trainer functions; logs streamed into
``train_logs`` while it runs; the stop flag terminates it). The parent then loads no model at all: the grounder's
rows need only its tokenizer, and cached agents are dropped so the GPUs are free for the training ranks.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from engine import prompts
from engine.config import RunConfig
from engine.curation_summary import live_pair_actions
from engine.errors import StageStopped
from engine.export import pair_rows
from engine.outcome import gold_step_results
from engine.stages.checkpoints import (
    checkpoint_kind,
    discard_output,
    keep_previous,
    model_ref,
    optimizer_steps,
    partial_dir,
    publish,
    save_checkpoint,
    train_logger,
    training_precision,
)
from engine.stages.context import StageContext
from engine.tasks import Task
from engine.turns import Agent, grounding_messages, plan_subgoals
from engine.verdict_curation import effective_sft_records


def launched(ctx: StageContext) -> bool:
    return ctx.config.launch.mode == "accelerate"


def prompt_agent(ctx: StageContext, role: str) -> Agent:
    """The starting agent without its weights (the tokenizer renders the rows; the subprocess loads the model)."""
    from engine.models import load_tokenizer

    ref = model_ref(ctx, role, ctx.iteration)
    return Agent(None, load_tokenizer(ref.adapter or ref.path), getattr(ctx.config, role).chat_template)


def train_launched(ctx: StageContext, role: str, kind: str, rows: list[dict[str, str]], settings) -> dict:
    """Train ``role`` on ``rows`` in an ``accelerate launch`` subprocess and record its checkpoint; returns the
    counts it adds to the stage's: ``log_lines`` and ``rank_steps`` (the optimizer steps each worker did)."""
    import gc

    import torch

    from engine.launch import rank_steps, run_training

    ctx.forget_agents()  # the parent's cached models would sit on GPU 0 beside a training rank
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    reference = None
    if kind == "dpo" and settings.reference == "initial" and ctx.iteration > 1:
        reference = model_ref(ctx, role, 1)  # the warm-start planner, frozen
    stage = ctx.stage or f"train_{role}"
    ranks = ctx.config.launch.num_processes
    output, partial = ctx.iteration_dir() / role, partial_dir(ctx, role)
    work_dir, total = ctx.iteration_dir() / "launch" / stage, optimizer_steps(-(-len(rows) // ranks), settings)

    def show_ranks(steps: dict[int, int]) -> None:  # every worker's progress, not only rank 0's log lines
        ctx.report(min(steps.values()), total, "workers at steps " + ", ".join(f"{r}: {n}" for r, n in steps.items()))

    lines = run_training(stage=stage, kind=kind, work_dir=work_dir, output_dir=partial, rows=rows, settings=settings,
                         model=model_ref(ctx, role, ctx.iteration), reference=reference, launch=ctx.config.launch,
                         on_log=train_logger(ctx, total), should_stop=ctx.should_stop, on_ranks=show_ranks)
    publish(partial, output)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, role, str(output), checkpoint_kind(settings))
    return {"log_lines": lines, "rank_steps": {str(r): n for r, n in rank_steps(work_dir).items()}}


def run_planner(ctx: StageContext) -> dict[str, Any]:
    """DPO on the effective pairs (``stages.planner_objective = dpo``; grpo: engine/stages/train_grpo.py)."""
    from engine.training import StopLatch, dpo_train

    discard_output(ctx, "planner")
    # The curator actions in effect as the pairs are read: the Pairs tab tells later overrides (not in this
    # checkpoint) from these (engine.curation_summary).
    curation = live_pair_actions(ctx.store, ctx.run_id, ctx.iteration)
    rows = [{"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]}
            for r in pair_rows(ctx.store, ctx.run_id, ctx.iteration)]
    if not rows:
        return {**keep_previous(ctx, "planner", "no preference pairs: planner unchanged"), "curation": curation}
    settings = copy.deepcopy(ctx.config.dpo)
    settings.seed = ctx.config.run.seed + ctx.iteration
    precision = training_precision(ctx, "planner", settings)
    if launched(ctx):
        return {"rows": len(rows), "precision": precision, "curation": curation,
                **train_launched(ctx, "planner", "dpo", rows, settings)}
    start = ctx.agent("planner")
    model = ctx.take_model("planner")  # a "previous" reference is dpo_train's frozen copy of it
    ref_model = None
    if settings.reference == "initial" and ctx.iteration > 1:
        # The warm-start planner, frozen: loaded after the take, so never the object being trained (an iteration 1
        # that kept its planner leaves both at one path).
        ref_model = ctx.plain_model("planner", iteration=1)
    model.train()
    on_log = train_logger(ctx, optimizer_steps(len(rows), settings))
    stop = StopLatch(ctx.should_stop)
    trained, history = dpo_train(model, start.tokenizer, rows, settings, ref_model=ref_model, on_log=on_log,
                                 should_stop=stop)
    if stop.cut:  # stopped mid-training: no checkpoint
        raise StageStopped("train_planner stopped at the user's request")
    path = save_checkpoint(ctx, "planner", start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, "planner", path, checkpoint_kind(settings))
    return {"rows": len(rows), "log_lines": len(history), "precision": precision, "curation": curation}


# One grounder training example: (task, step, subgoals shown, actions to learn); step 0 = onetime layout, s >= 1 =
# the iterative layout for subgoal s after the gold history.
Example = tuple[Task, int, list[str], str]


def original_grounder_rows(config: RunConfig, tasks: list[Task]) -> list[Example]:
    """The grounder's original data: the gold plans and actions of the given tasks, or of ``sft.original_data``, or,
    with ``data.exclude_tasks``, of the train tasks it lists (what the warm start was fit to: the run's own train
    tasks are the ones it was not), in the run's formulation (iterative: one example per gold step)."""
    if config.sft.original_data:
        from engine.tasks import load_tasks

        tasks = [t for t in load_tasks(config.sft.original_data) if t.split == "train"]
    elif config.data.exclude_tasks:
        from engine.runtime import excluded_tasks

        tasks = excluded_tasks(config)
    rows: list[Example] = []
    for t in tasks:
        if not (t.gold_subgoals and t.gold_actions):
            continue
        if config.sample.formulation == "iterative":
            rows += [(t, s, [t.gold_subgoals[s - 1]], t.gold_actions[s - 1])
                     for s in range(1, min(len(t.gold_subgoals), len(t.gold_actions)) + 1)]
        else:
            rows.append((t, 0, list(t.gold_subgoals), t.actions_text))
    return rows


def _grounder_examples(ctx: StageContext) -> list[Example]:
    """What stage 2 learns from, by ``stages.grounder_data``: the critic's verdicts after curator overrides, or the
    grounder's own groundings of the same plans unchecked (``raw``) or filtered by execution (``executed``)."""
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    mode = ctx.config.stages.grounder_data
    if mode == "critic":
        records = effective_sft_records(ctx.store, ctx.run_id, ctx.iteration)
        return [(tasks[r["task_id"]], r["step"], r["subgoals"], r["actions"]) for r in records]
    frame = ctx.store.query(
        "SELECT g.task_id, g.step, g.actions, g.correct, p.subgoals_json, p.text FROM groundings g JOIN plans p "
        "USING (run_id, iteration, task_id, step, k) WHERE g.run_id = ? AND g.iteration = ? ORDER BY g.task_id, "
        "g.step, g.k", [ctx.run_id, ctx.iteration])
    return [(tasks[r.task_id], int(r.step), plan_subgoals(json.loads(r.subgoals_json), r.text), r.actions)
            for r in frame.itertuples(index=False) if r.actions.strip() and (mode == "raw" or bool(r.correct))]


def grounder_sft_rows(agent: Agent, examples: list[Example]) -> list[dict[str, str]]:
    """TRL prompt/completion rows, each rendered in its own layout (onetime or iterative) by the agent's template."""
    results: dict[str, list[str]] = {}
    rows = []
    for task, step, subgoals, actions in examples:
        if step and task.id not in results:
            results[task.id] = gold_step_results(task)
        messages = grounding_messages(task, step, subgoals, results.get(task.id, []), actions)
        prompt, completion = prompts.prompt_and_completion(messages, agent.chat_template, agent.tokenizer)
        completion = prompts.training_completion(completion, agent.tokenizer.eos_token)
        rows.append({"prompt": prompt, "completion": completion})
    return rows


def mix_original(new: list[Example], original: list[Example], ratio: float, seed: int) -> list[Example]:
    """``new`` plus the original data: all of it (``ratio`` = -1, the paper) or ``round(ratio x len(new))`` rows drawn
    at random (at most all of them)."""
    n = len(original) if ratio < 0 else min(len(original), int(round(len(new) * ratio)))
    return new + (original if n == len(original) else random.Random(seed).sample(original, n))


def run_grounder(ctx: StageContext) -> dict[str, int | str]:
    from engine.training import StopLatch, sft_train

    discard_output(ctx, "grounder")
    new = _grounder_examples(ctx)
    if not new:
        return keep_previous(ctx, "grounder", "no accepted or corrected groundings: grounder unchanged")
    original = original_grounder_rows(ctx.config, ctx.store.get_tasks(ctx.run_id, split="train"))
    mixed = mix_original(new, original, ctx.config.sft.original_ratio, ctx.config.run.seed + ctx.iteration)
    n_original = len(mixed) - len(new)
    start = prompt_agent(ctx, "grounder") if launched(ctx) else ctx.agent("grounder")
    rows = grounder_sft_rows(start, mixed)
    settings = copy.deepcopy(ctx.config.sft)
    settings.seed = ctx.config.run.seed + ctx.iteration
    counts = {"rows": len(rows), "new_rows": len(new), "original_rows": n_original,
              "precision": training_precision(ctx, "grounder", settings)}
    if launched(ctx):
        return {**counts, **train_launched(ctx, "grounder", "sft", rows, settings)}
    model = ctx.take_model("grounder")
    model.train()
    on_log = train_logger(ctx, optimizer_steps(len(rows), settings))
    stop = StopLatch(ctx.should_stop)
    trained, history = sft_train(model, start.tokenizer, rows, settings, on_log=on_log, should_stop=stop,
                                 micro_batches=settings.micro_batches)
    if stop.cut:  # stopped mid-training: no checkpoint
        raise StageStopped("train_grounder stopped at the user's request")
    path = save_checkpoint(ctx, "grounder", start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, "grounder", path, checkpoint_kind(settings))
    return {**counts, "log_lines": len(history)}

