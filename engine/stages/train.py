"""Stages ``train_planner`` (DPO on the effective pairs) and ``train_grounder`` (SFT on critic-checked groundings).

Both train a fresh copy of the iteration's starting agent with TRL, log every TRL log line into ``train_logs``,
honour the stop flag after each optimizer step, and save the result as the iteration's checkpoint
(``run_dir/iter_TT/<role>``, full weights; a LoRA run merges its adapter first). With nothing to train on they
record the starting checkpoint unchanged, so the next iteration always has a planner and a grounder.
"""

from __future__ import annotations

import copy
import json
import random

from engine import prompts
from engine.config import RunConfig
from engine.curation import effective_sft_records
from engine.export import pair_rows
from engine.stages.context import StageContext, StageStopped
from engine.tasks import Task
from engine.turns import Agent


def _save(ctx: StageContext, role: str, agent: Agent, model) -> str:
    path = ctx.iteration_dir() / role
    model.save_pretrained(path, safe_serialization=True)
    agent.tokenizer.save_pretrained(path)
    return str(path)


def _keep_previous(ctx: StageContext, role: str, reason: str) -> dict[str, int | str]:
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, role, ctx.agent_path(role, ctx.iteration), "unchanged")
    ctx.report(1, 1, reason)
    return {"rows": 0, "note": reason}


def _train_logger(ctx: StageContext, total_steps: int):
    ctx.store.delete("train_logs", ctx.run_id, ctx.iteration, stage=ctx.stage)  # a re-run starts training afresh

    def on_log(logs: dict) -> None:
        ctx.store.add_train_logs(ctx.run_id, ctx.iteration, ctx.stage, [logs])
        ctx.report(int(logs.get("step", 0)), total_steps, f"loss {logs.get('loss', '-')}")

    return on_log


def _steps(n_rows: int, settings) -> int:
    if settings.max_steps > 0:
        return settings.max_steps
    per_step = settings.batch_size * settings.grad_accum
    return max(1, int(-(-n_rows // per_step) * settings.epochs))


def run_planner(ctx: StageContext) -> dict[str, int | str]:
    from engine.training import dpo_train

    rows = [{"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]}
            for r in pair_rows(ctx.store, ctx.run_id, ctx.iteration)]
    if not rows:
        return _keep_previous(ctx, "planner", "no preference pairs: planner unchanged")
    start = ctx.agent("planner")
    settings = copy.deepcopy(ctx.config.dpo)
    settings.seed = ctx.config.run.seed + ctx.iteration
    ref_model = None
    if settings.reference == "initial" and ctx.iteration > 1:
        ref_model = ctx.agent("planner", iteration=1).model  # the warm-start planner, frozen
    model = copy.deepcopy(start.model)  # the cached starting planner stays intact for later stages
    model.train()
    trained, history = dpo_train(model, start.tokenizer, rows, settings, ref_model=ref_model,
                                 on_log=_train_logger(ctx, _steps(len(rows), settings)), should_stop=ctx.should_stop)
    ctx.check_stop()  # stopped mid-training: no checkpoint
    path = _save(ctx, "planner", start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, "planner", path, "lora-merged" if settings.lora else "full")
    return {"rows": len(rows), "log_lines": len(history)}


def original_grounder_rows(config: RunConfig, tasks: list[Task]) -> list[tuple[Task, list[str], str]]:
    """The grounder's original data: gold (subgoals, actions) of the given tasks."""
    if config.sft.original_data:
        from engine.tasks import load_tasks

        tasks = [t for t in load_tasks(config.sft.original_data) if t.split == "train"]
    return [(t, t.gold_subgoals, t.actions_text) for t in tasks if t.gold_subgoals and t.gold_actions]


def _grounder_examples(ctx: StageContext) -> list[tuple[Task, list[str], str]]:
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    if ctx.config.stages.critic:
        records = effective_sft_records(ctx.store, ctx.run_id, ctx.iteration)
        return [(tasks[r["task_id"]], r["subgoals"], r["actions"]) for r in records]
    # No critic (ablation): learn only from groundings that executed to the right answer.
    frame = ctx.store.query(
        "SELECT g.task_id, g.actions, p.subgoals_json FROM groundings g JOIN plans p USING "
        "(run_id, iteration, task_id, step, k) WHERE g.run_id = ? AND g.iteration = ? AND g.correct",
        [ctx.run_id, ctx.iteration])
    return [(tasks[r.task_id], json.loads(r.subgoals_json), r.actions) for r in frame.itertuples(index=False)
            if json.loads(r.subgoals_json)]


def run_grounder(ctx: StageContext) -> dict[str, int | str]:
    from engine.training import sft_train

    new = _grounder_examples(ctx)
    if not new:
        return _keep_previous(ctx, "grounder", "no accepted or corrected groundings: grounder unchanged")
    original = original_grounder_rows(ctx.config, ctx.store.get_tasks(ctx.run_id, split="train"))
    n_original = min(len(original), int(round(len(new) * ctx.config.sft.original_ratio)))
    mixed = new + random.Random(ctx.config.run.seed + ctx.iteration).sample(original, n_original)
    start = ctx.agent("grounder")
    rows = []
    for task, subgoals, actions in mixed:
        prompt, completion = prompts.prompt_and_completion(prompts.grounder_messages(task, subgoals, [actions]),
                                                           start.chat_template, start.tokenizer)
        rows.append({"prompt": prompt, "completion": completion.removesuffix(start.tokenizer.eos_token or "")})
    settings = copy.deepcopy(ctx.config.sft)
    settings.seed = ctx.config.run.seed + ctx.iteration
    model = copy.deepcopy(start.model)
    model.train()
    trained, history = sft_train(model, start.tokenizer, rows, settings,
                                 on_log=_train_logger(ctx, _steps(len(rows), settings)), should_stop=ctx.should_stop)
    if ctx.should_stop():
        raise StageStopped("train_grounder stopped at the user's request")
    path = _save(ctx, "grounder", start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, "grounder", path, "lora-merged" if settings.lora else "full")
    return {"rows": len(rows), "new_rows": len(new), "original_rows": n_original, "log_lines": len(history)}

