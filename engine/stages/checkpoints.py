"""The checkpoint lifecycle every training stage shares (``train_planner``/``train_grounder`` with TRL's DPO, SFT and
GRPO trainers, and the warm-start stages): discard what an earlier attempt left, write the trained model into this
attempt's own ``<role>.partial-<pid>`` directory, rename it into place when whole, then store its row; or record the
starting checkpoint unchanged when there is nothing to train on. Also the pieces of a training run's bookkeeping:
its precision in the run's log, its log lines in ``train_logs``, its optimizer-step count.

Contract: a recorded checkpoint is always whole (the rename comes before the row); a (re-)run starts from nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from engine.stages.context import StageContext, crash_point
from engine.turns import Agent


def discard_output(ctx: StageContext, role: str) -> None:
    """Start a (re-)run of a training stage clean: an attempt killed or stopped before "done" may have left a
    half-written checkpoint, or a whole one with its row, and its log lines; none may be used: training starts over."""
    ctx.store.delete("checkpoints", ctx.run_id, ctx.iteration, role=role)
    ctx.store.delete("train_logs", ctx.run_id, ctx.iteration, stage=ctx.stage or f"train_{role}")
    base = ctx.iteration_dir()
    for path in [base / role, *base.glob(f"{role}.partial*"), *base.glob(f"{role}.old*")]:
        shutil.rmtree(path, ignore_errors=True)


def publish(partial: Path, final: Path) -> None:
    """Move a completely written checkpoint directory into place by rename (atomic within one file system), so
    ``final`` is either absent or whole -- never half-written."""
    old = final.with_name(final.name + ".old")
    if final.exists():
        final.rename(old)
    partial.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def partial_dir(ctx: StageContext, role: str) -> Path:
    """This attempt's own temp directory: a stale writer from a killed attempt (an orphaned training worker) can
    never mix its files into it."""
    return ctx.iteration_dir() / f"{role}.partial-{os.getpid()}"


def checkpoint_kind(settings) -> str:
    """How a training stage's result is stored: full weights, LoRA merged into them, or the LoRA adapter alone."""
    if not settings.lora:
        return "full"
    return "lora-adapter" if settings.save_adapter else "lora-merged"


def save_checkpoint(ctx: StageContext, role: str, agent: Agent, model) -> str:
    """Write the trained model as the iteration's checkpoint: full weights, or (a LoRA ``PeftModel`` kept unmerged)
    the adapter and the model it was trained on (``engine.models.save_adapter_checkpoint``)."""
    from engine.models import save_adapter_checkpoint

    final, partial = ctx.iteration_dir() / role, partial_dir(ctx, role)
    if hasattr(model, "peft_config"):
        start = model_ref(ctx, role, ctx.iteration)
        save_adapter_checkpoint(model, agent.tokenizer, partial, start.path, start.adapter)
        crash_point(ctx.iteration, ctx.stage, "save")
    else:
        model.save_pretrained(partial, safe_serialization=True)
        crash_point(ctx.iteration, ctx.stage, "save")  # weights written, tokenizer not yet: a half-written checkpoint
        agent.tokenizer.save_pretrained(partial)
    publish(partial, final)
    return str(final)


def training_precision(ctx: StageContext, role: str, settings) -> str:
    """The precision this training runs in and why (``engine.precision``), reported to the run's log."""
    from engine.models import resolve_device, resolve_dtype
    from engine.precision import describe
    from engine.training import HALF_DTYPES

    section = getattr(ctx.config, role)
    device = resolve_device(section.device)
    text = describe(settings.bf16, device)
    loaded = resolve_dtype(section.dtype, device)
    if loaded in HALF_DTYPES and not settings.lora:  # engine.training.master_weights_dtype (ZeRO-3 aside)
        text += f"; {str(loaded).removeprefix('torch.')} weights trained as fp32 master weights"
    ctx.report(0, 1, f"training in {text}")
    return text


def keep_previous(ctx: StageContext, role: str, reason: str) -> dict[str, int | str]:
    ctx.store.put_checkpoint(ctx.run_id, ctx.iteration, role, ctx.agent_path(role, ctx.iteration), "unchanged")
    ctx.report(1, 1, reason)
    return {"rows": 0, "note": reason}


def train_logger(ctx: StageContext, total_steps: int):
    def on_log(logs: dict) -> None:
        ctx.store.add_train_logs(ctx.run_id, ctx.iteration, ctx.stage, [logs])
        ctx.report(int(logs.get("step", 0)), total_steps, f"loss {logs.get('loss', '-')}")

    return on_log


def optimizer_steps(n_rows: int, settings) -> int:
    if settings.max_steps > 0:
        return settings.max_steps
    per_step = settings.batch_size * settings.grad_accum
    return max(1, int(-(-n_rows // per_step) * settings.epochs))


def model_ref(ctx: StageContext, role: str, iteration: int):
    """What ``ctx.agent(role, iteration)`` would load, as a path for the training subprocess."""
    from engine.launch import ModelRef

    section = getattr(ctx.config, role)
    path = ctx.agent_path(role, iteration)
    # As in runtime.load_agent: the configured adapter applies to the configured model only, not to checkpoints.
    return ModelRef(path=path, adapter=section.adapter if path == section.path else "", dtype=section.dtype)
