"""Stages ``train_planner`` / ``train_grounder`` by online group RL (TRL's GRPO), when ``stages.planner_objective``
/ ``stages.grounder_objective`` = ``grpo``.

The planner: instead of DPO on the offline pairs, the trainer samples ``grpo.num_generations`` plans per training
task of the iteration (the tasks the sample stage used), rewards each with the named rewards of ``grpo.rewards``
(engine/rewards.py: the iteration's grounder supplies the ``gap`` and ``execution`` signals, so the planner is still
aligned to *this* grounder, online) and learns from their group advantages. The grounder is loaded only when one of
those two is configured (``GROUNDER_READERS``); otherwise one an earlier stage left cached is dropped first. A task
trains only when every configured reward can score it (``PLANNER_REWARD_NEEDS``: ``gap`` needs gold actions,
``execution`` a gold answer; ``format`` and ``overlong`` nothing); the counts say how many were left out for each
reward (``left_out``), and why in ``left_out_note`` (in ``note`` when none is left, and the planner is kept). The
sample, score and pairs stages still run: stage 2 grounds the sampled plans, and the studio can show a task's DPO
pair beside its GRPO group.

The grounder: instead of SFT on the critic's verdicts, the trainer samples ``grpo_grounder.num_generations`` action
sequences for each distinct prompt the ground stage grounded (the plans ``ground.which`` picked, as the planner
wrote them) and rewards each by ``grpo_grounder.rewards`` (execution against the gold answer, format): the grounder
learns to execute its planner's real plans from its own attempts, with no critic in the loop.

Either role's cached model is trained in place and taken out of the stage context's cache (as for DPO/SFT), except
a planner whose grounder rewards ground with that very model (one path or one set of weights in both roles): a copy
of it trains then. Every rollout is stored in ``rollouts`` with its role (text, each reward, weighted total,
advantage) once training has finished; the checkpoint is saved as for DPO/SFT (``engine.stages.train``). Crash
safety as there: a re-run discards the checkpoint, the log lines and the role's rollouts of an earlier attempt and
trains from the start; the rollouts and the checkpoint row are written only after training completed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from engine import generation
from engine.config_training import GROUNDER_READERS
from engine.errors import StageStopped
from engine.outcome import toolbox_for
from engine.rewards import (
    ActionExecutionReward,
    ActionFormatReward,
    ExecutionReward,
    FormatReward,
    GapReward,
    RolloutBook,
    grounder_actions,
    overlong_reward,
)
from engine.stages.checkpoints import (
    checkpoint_kind,
    discard_output,
    keep_previous,
    optimizer_steps,
    save_checkpoint,
    train_logger,
    training_precision,
)
from engine.stages.context import StageContext
from engine.tasks import Task
from engine.turns import planner_prompt

# What each planner reward reads from a task, and the test that the task has it; rewards not named need nothing.
PLANNER_REWARD_NEEDS: dict[str, tuple[str, Callable[[Task], bool]]] = {
    "gap": ("gold actions", lambda t: bool(t.gold_actions)),
    "execution": ("a gold answer", lambda t: bool(t.answer.strip())),
}


def scorable_tasks(tasks: list[Task], rewards: Sequence[str]) -> tuple[list[Task], dict[str, int]]:
    """The tasks every reward of ``rewards`` can score, and per reward how many tasks lack what it needs (a task
    lacking two rewards' fields counts under both)."""
    needs = [(name, PLANNER_REWARD_NEEDS[name]) for name in rewards if name in PLANNER_REWARD_NEEDS]
    left_out = {name: sum(not has(t) for t in tasks) for name, (_, has) in needs}
    kept = [t for t in tasks if all(has(t) for _, (_, has) in needs)]
    return kept, {name: n for name, n in left_out.items() if n}


def drop_unread_grounder(ctx: StageContext, rewards: Sequence[str]) -> None:
    """Free the grounder an earlier stage left cached (the score stage's, in one process) when no reward of
    ``rewards`` reads it, so GRPO trains without a whole idle model beside it. Not with one base or one set of
    weights in both roles (``agents.topology = shared``), nor when both roles load one path: the planner *is* that
    cached model (dropping it would reload the planner), and the grounder's view of it costs nothing apart."""
    if GROUNDER_READERS.intersection(rewards) or ctx.config.agents.topology == "shared":
        return
    path = ctx.agent_path("grounder", ctx.iteration)
    if path != ctx.agent_path("planner", ctx.iteration):
        ctx.forget_agent(path)


def left_out_note(left_out: dict[str, int], kept: int) -> str:
    """``"3 training task(s) left out: the gap reward needs gold actions, which they lack"``, one clause per
    reward; with no task ``kept``, ending in ``"; planner unchanged"``."""
    parts = [f"{n} training task(s) left out: the {name} reward needs {PLANNER_REWARD_NEEDS[name][0]}, which they "
             "lack" for name, n in left_out.items()]
    return "; ".join(parts) + ("; planner unchanged" if not kept else "")


def build_book(ctx: StageContext, tasks: dict) -> RolloutBook:
    """The configured rewards, in order, with their weights. The grounder is loaded only when a reward reads it
    (``GROUNDER_READERS``): each maker asks the context for it, which loads it once."""
    cfg = ctx.config.grpo
    makers = {
        "gap": lambda: GapReward(ctx.agent("grounder"), tasks, batch_size=ctx.config.score.batch_size),
        "execution": lambda: ExecutionReward(
            grounder_actions(ctx.agent("grounder"), ctx.config.evaluate.ground_max_new_tokens,
                             ctx.config.evaluate.batch_size),
            tasks, toolbox_for(ctx.config.tools)),
        "format": FormatReward,
        "overlong": lambda: overlong_reward(cfg.max_completion_length, cfg.overlong_cache),
    }
    weights = {"gap": cfg.weight_gap, "execution": cfg.weight_execution, "format": cfg.weight_format,
               "overlong": cfg.weight_overlong}
    return RolloutBook([makers[name]() for name in cfg.rewards], [weights[name] for name in cfg.rewards],
                       cfg.num_generations, cfg.scale_rewards)


def build_grounder_book(ctx: StageContext, tasks: dict) -> RolloutBook:
    """The grounder's configured rewards (``grpo_grounder.rewards``), in order, with their weights."""
    cfg = ctx.config.grpo_grounder
    makers = {
        "execution": lambda: ActionExecutionReward(tasks, toolbox_for(ctx.config.tools)),
        "format": ActionFormatReward,
        "overlong": lambda: overlong_reward(cfg.max_completion_length, cfg.overlong_cache),
    }
    weights = {"execution": cfg.weight_execution, "format": cfg.weight_format, "overlong": cfg.weight_overlong}
    return RolloutBook([makers[name]() for name in cfg.rewards], [weights[name] for name in cfg.rewards],
                       cfg.num_generations, cfg.scale_rewards)


def rollout_frame(ctx: StageContext, book: RolloutBook, role: str) -> pd.DataFrame:
    return pd.DataFrame([{
        "run_id": ctx.run_id, "iteration": ctx.iteration, "role": role, "batch": r.batch, "n": r.n,
        "task_id": r.task_id,
        "prompt": r.prompt, "text": r.text, "rewards_json": json.dumps(r.rewards), "reward": r.reward,
        "advantage": r.advantage,
    } for r in book.rollouts])


def run_planner(ctx: StageContext) -> dict[str, Any]:
    discard_output(ctx, "planner")
    ctx.store.delete("rollouts", ctx.run_id, ctx.iteration, role="planner")
    tasks, left_out = scorable_tasks(ctx.train_tasks(), ctx.config.grpo.rewards)
    if not tasks:
        reason = left_out_note(left_out, 0) if left_out else "no training tasks: planner unchanged"
        return {**keep_previous(ctx, "planner", reason), "left_out": left_out}
    settings = copy.deepcopy(ctx.config.grpo)
    settings.seed = ctx.config.run.seed + ctx.iteration
    precision = training_precision(ctx, "planner", settings)
    drop_unread_grounder(ctx, settings.rewards)
    start = ctx.agent("planner")
    book = build_book(ctx, {t.id: t for t in tasks})
    rows = [{"prompt": planner_prompt(start, t), "task_id": t.id} for t in tasks]
    counts = _train(ctx, "planner", start, rows, settings, book, precision)
    if left_out:  # kept apart from "note", which the studio shows instead of the training line
        counts.update(left_out=left_out, left_out_note=left_out_note(left_out, len(tasks)))
    return counts


def run_grounder(ctx: StageContext) -> dict[str, Any]:
    discard_output(ctx, "grounder")
    ctx.store.delete("rollouts", ctx.run_id, ctx.iteration, role="grounder")
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    frame = ctx.store.query("SELECT task_id, prompt FROM groundings WHERE run_id = ? AND iteration = ? AND step = 0 "
                            "ORDER BY task_id, k", [ctx.run_id, ctx.iteration])
    # One row per distinct prompt (a plan sampled twice is one prompt); only tasks whose answer can be checked.
    rows = list({r.prompt: {"prompt": r.prompt, "task_id": r.task_id} for r in frame.itertuples(index=False)
                 if tasks[r.task_id].answer.strip()}.values())
    if not rows:
        return keep_previous(ctx, "grounder", "no grounded plans with a gold answer: grounder unchanged")
    settings = copy.deepcopy(ctx.config.grpo_grounder)
    settings.seed = ctx.config.run.seed + ctx.iteration
    precision = training_precision(ctx, "grounder", settings)
    start = ctx.agent("grounder")
    book = build_grounder_book(ctx, tasks)
    return _train(ctx, "grounder", start, rows, settings, book, precision)


def rewards_ground_with(ctx: StageContext, role: str, start, rewards: Sequence[str]) -> bool:
    """Whether a planner reward of ``rewards`` grounds with ``start``'s very model (both roles load one path, or one
    set of weights): trained in place, the grounder scoring the rollouts would drift with the policy."""
    return role == "planner" and bool(GROUNDER_READERS.intersection(rewards)) \
        and ctx.agent("grounder").model is start.model  # loaded by build_book already: no load here


def _train(ctx: StageContext, role: str, start, rows: list[dict[str, str]], settings, book: RolloutBook,
           precision: str) -> dict[str, Any]:
    """GRPO of ``role`` on ``rows``; then its rollouts, checkpoint and checkpoint row, in that order, and the stage's
    counts. The model trained is the cached one, taken out of the cache (``StageContext.take_model``: no second copy
    of the policy beside it, and a training stopped halfway is never served to a later stage); ``start`` keeps the
    tokenizer, stop ids and checkpoint layout. Only when a reward grounds with that same model is a copy trained, so
    the rewards keep scoring with the starting weights."""
    from engine.training import StopLatch, grpo_train

    if rewards_ground_with(ctx, role, start, settings.rewards):
        model = ctx.model_copy(role)
    else:
        model = ctx.take_model(role)
    model.train()
    total = optimizer_steps(len(rows) * settings.num_generations, settings)
    stop = StopLatch(ctx.should_stop)
    trained, history = grpo_train(model, start.tokenizer, rows, settings, book,
                                  stop_token_ids=generation.stop_token_ids(start.model, start.tokenizer),
                                  on_log=train_logger(ctx, total), should_stop=stop)
    if stop.cut:  # stopped mid-training: no checkpoint, no rollouts
        raise StageStopped(f"{ctx.stage} stopped at the user's request")
    ctx.store.write("rollouts", rollout_frame(ctx, book, role))
    path = save_checkpoint(ctx, role, start, trained)
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, role, path, checkpoint_kind(settings))
    scored = [r.reward for r in book.rollouts if r.reward is not None]
    return {"rows": len(rows), "rollouts": len(book.rollouts), "log_lines": len(history), "precision": precision,
            "objective": "grpo", "rewards": list(settings.rewards),
            "mean_reward": round(sum(scored) / len(scored), 4) if scored else None,
            "zero_advantage_groups": _flat_groups(book)}


def _flat_groups(book: RolloutBook) -> int:
    """Groups whose completions all got zero advantage (their reward did not vary: nothing learned from them)."""
    size = book.num_generations
    advantages = [r.advantage for r in book.rollouts]
    return sum(all(a == 0 for a in advantages[i:i + size]) for i in range(0, len(advantages), size))
