"""Stages ``warm_start_planner`` and ``warm_start_grounder``: iteration 0 of a run with ``warm_start.enabled``.

The paper starts MOAT from Lumos agents: a planner and a grounder each fine-tuned on Lumos training data. A user
with a base or instruct model has none, so these stages make them: SFT of the configured model on the run's
training tasks (split ``train``, e.g. the Lumos files of ``[[data.sources]]``), the planner on the gold plans, the
grounder on the gold actions given the gold plans, each in the run's formulation (onetime, or iterative with one
example per step) and rendered with the agent's own chat template. The results are iteration 0's checkpoints, so
the iteration-0 evaluation measures these independently trained agents (the paper's baseline) and iteration 1
starts from them.

Epochs and learning rates per role come from ``[warm_start]``, every other training setting (batch size, LoRA,
precision, ...) from ``[sft]``. Stored, resumable and crash-safe like the loop's training stages (the same helpers
of ``engine.stages.train``: a re-run discards a partial checkpoint and trains again; ``launch.mode = "accelerate"``
trains in a subprocess).
"""

from __future__ import annotations

import copy

from engine import prompts
from engine.config import RunConfig
from engine.errors import StageStopped
from engine.outcome import gold_step_results
from engine.stages import checkpoints, train
from engine.stages.context import StageContext
from engine.tasks import Task
from engine.turns import Agent


def planner_rows(agent: Agent, tasks: list[Task], formulation: str) -> list[dict[str, str]]:
    """TRL prompt/completion rows teaching the gold plan of each task that has one (iterative: one row per subgoal
    after the gold history, and the closing "stop planning" turn)."""
    rows = []
    for task in tasks:
        if not task.gold_subgoals:
            continue
        if formulation == "onetime":
            chats = [prompts.planner_messages(task, task.gold_subgoals)]
        else:
            results = gold_step_results(task) if task.gold_actions else None
            if results is None and task.domain != "web":  # iterative feedback needs the executed gold steps
                continue
            n = len(task.gold_subgoals)
            chats = [prompts.planner_messages(task, task.gold_subgoals[:k], "iterative",
                                              None if results is None else results[:k - 1])
                     for k in range(1, n + 1)]
            if results is not None and len(results) >= n:
                chats.append(prompts.planner_messages(task, task.gold_subgoals, "iterative", results[:n]))
        for messages in chats:
            prompt, completion = prompts.prompt_and_completion(messages, agent.chat_template, agent.tokenizer)
            completion = prompts.training_completion(completion, agent.tokenizer.eos_token)
            rows.append({"prompt": prompt, "completion": completion})
    return rows


def _settings(config: RunConfig, role: str):
    settings = copy.deepcopy(config.sft)
    settings.epochs = getattr(config.warm_start, f"{role}_epochs")
    settings.learning_rate = getattr(config.warm_start, f"{role}_learning_rate")
    settings.seed = config.run.seed
    return settings


def _run(ctx: StageContext, role: str) -> dict[str, int | str]:
    from engine.training import StopLatch, sft_train

    checkpoints.discard_output(ctx, role)
    tasks = ctx.store.get_tasks(ctx.run_id, split="train")
    start = train.prompt_agent(ctx, role) if train.launched(ctx) else ctx.agent(role)
    if role == "planner":
        rows = planner_rows(start, tasks, ctx.config.sample.formulation)
    else:
        rows = train.grounder_sft_rows(start, train.original_grounder_rows(ctx.config, tasks))
    if not rows:
        raise ValueError(f"warm_start: no training task with gold {'plans' if role == 'planner' else 'actions'} "
                         "(split 'train'): add a data.sources entry with Lumos training files, or set "
                         "warm_start.enabled = false")
    settings = _settings(ctx.config, role)
    precision = checkpoints.training_precision(ctx, role, settings)
    counts: dict[str, int | str] = {"rows": len(rows), "precision": precision}
    if train.launched(ctx):
        return {**counts, **train.train_launched(ctx, role, "sft", rows, settings)}
    model = ctx.take_model(role)
    model.train()
    on_log = checkpoints.train_logger(ctx, checkpoints.optimizer_steps(len(rows), settings))
    stop = StopLatch(ctx.should_stop)
    trained, history = sft_train(model, start.tokenizer, rows, settings, on_log=on_log, should_stop=stop)
    if stop.cut:  # stopped mid-training: no checkpoint
        raise StageStopped(f"{ctx.stage} stopped at the user's request")
    path = checkpoints.save_checkpoint(ctx, role, start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, role, path, checkpoints.checkpoint_kind(settings))
    ctx.forget_agents()  # the evaluation and iteration 1 load what this stage saved
    return {**counts, "log_lines": len(history)}


def run_planner(ctx: StageContext) -> dict[str, int | str]:
    return _run(ctx, "planner")


def run_grounder(ctx: StageContext) -> dict[str, int | str]:
    return _run(ctx, "grounder")
