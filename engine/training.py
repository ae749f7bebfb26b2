"""Run TRL's SFT, DPO and GRPO trainers on in-memory models; return the trained model and every logged step.

The loss is always TRL's (``SFTTrainer`` completion-only loss, ``DPOTrainer`` sigmoid loss by default); this module
only builds their configs, datasets and callbacks:

- ``sft_train(model, tokenizer, rows, settings)`` with rows ``{"prompt", "completion"}``;
- ``dpo_train(model, tokenizer, rows, settings, ref_model=None)`` with rows ``{"prompt", "chosen", "rejected"}``;
- ``grpo_train(model, tokenizer, rows, settings, book)`` with rows ``{"prompt", "task_id"}``: TRL's GRPO loss on
  ``settings.num_generations`` rollouts per prompt, rewarded by ``book`` (``engine.rewards.RolloutBook``, which
  keeps every rollout).

With LoRA the caller gets the ``PeftModel`` (``save_adapter``, the default: the checkpoint is the adapter alone,
``engine.models.save_adapter_checkpoint``) or, with ``save_adapter = false``, the adapter merged back into plain
weights. The DPO reference is
explicit (see ``DPOSettings.reference``): TRL's default of reloading ``config._name_or_path`` is never used for full
fine-tuning. ``should_stop`` is polled after every optimizer step; ``on_log`` receives each TRL log dict.

``settings.loss_tokens_only`` makes TRL's fused LM head score only the positions its loss reads (``loss_tokens_only``
below): the same loss up to float rounding, without the prompt and padding positions a CPU would otherwise compute.
``sft_train(micro_batches=n)`` cuts each batch into n micro-batches of similar length (``micro_batch_args``): the same
batches and steps up to float rounding, with less padding computed.

Full fine-tuning of weights loaded in bf16 or fp16 trains fp32 master weights (``master_weights_dtype``), as mixed
precision means: autocast computes in bf16, the weights and AdamW's state are fp32, and the trained model comes back
in the dtype it was loaded in. DPO's frozen reference computes in fp32 beside them (``_reference_in_fp32``).
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import TrainerCallback

from engine.config import DPOSettings, GRPOSettings, TrainSettings
from engine.precision import use_bf16

LogSink = Callable[[dict[str, Any]], None]

# TRL 1.16 reads transformers' deprecated ``is_gradient_checkpointing`` alias around every generation and training
# step: one FutureWarning per step in a run's log (and the studio's), about code that is not ours to change.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)


class StepHooks(TrainerCallback):
    """Forwards every TRL log dict and honours a stop flag between optimizer steps."""

    def __init__(self, on_log: LogSink | None, should_stop: Callable[[], bool] | None):
        self.on_log_sink, self.should_stop = on_log, should_stop

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.on_log_sink is not None and logs:
            self.on_log_sink({"step": state.global_step, "epoch": state.epoch, **logs})

    def on_step_end(self, args, state, control, **kwargs):
        # Asked after every step, the last included: a launched worker counts its steps by these calls
        # (engine.train_worker.progress_hook). A StopLatch is told whether steps remain.
        if self.should_stop is None:
            return control
        last = state.global_step >= state.max_steps
        if self.should_stop.ask(last) if isinstance(self.should_stop, StopLatch) else self.should_stop():
            control.should_training_stop = True
        return control


class StopLatch:
    """The ``should_stop`` a training stage hands its trainer, which remembers whether a stop cut the training short
    (``cut``): asked after the last optimizer step, the training is whole whatever the answer. A stop pressed during
    the last step (the Run tab showed "5/5", then "stopped ... nothing kept") threw a whole training away; the stage
    now keeps it, and the loop stops before the next stage."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop, self.cut = should_stop, False

    def __call__(self) -> bool:  # a caller that does not say whether steps remain (not StepHooks)
        return self.ask(last=False)

    def ask(self, last: bool) -> bool:
        wants = self.should_stop()
        self.cut = self.cut or (wants and not last)
        return wants


def _common_args(settings: TrainSettings, device: torch.device, output_dir: str) -> dict[str, Any]:
    return dict(
        output_dir=output_dir,
        learning_rate=settings.learning_rate,
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length,
        bf16=use_bf16(settings.bf16, device),
        use_cpu=device.type == "cpu",
        activation_checkpointing=settings.activation_checkpointing,
        seed=settings.seed,
        logging_steps=settings.logging_steps,
        warmup_steps=settings.warmup_steps,
        lr_scheduler_type=settings.lr_scheduler,
        report_to=settings.report_to,
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def _lora_config(settings: TrainSettings):
    from peft import LoraConfig

    return LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                      target_modules=list(settings.lora_target_modules), task_type="CAUSAL_LM")


def _quiet(trainer):
    """Drop the callback that prints every log dict to stdout: logs go to ``on_log`` (the store), and the CLI's
    stdout is reserved for its one JSON object."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


@contextmanager
def loss_tokens_only(enabled: bool) -> Iterator[None]:
    """While training, score only the positions whose label is not ignored in TRL's fused LM head.

    TRL 1.16 computes its losses from ``ChunkedLogProbFunction`` over ``hidden_states[mask]`` where Triton runs
    (``compact``) and over every position elsewhere, so that a compiler for fixed shapes (Neuron) does not recompile
    per batch. On a CPU that means the log-softmax of the prompt and the padding is computed and thrown away: about
    a fifth of a demo SFT step. The decision is the module-level ``trl.trainer.utils._use_triton``; this switches it
    to "compact" for the duration and restores it after (process-wide: a trainer running in another thread of this
    process meanwhile is switched too, which changes its speed, not its loss). The kernels read their own
    reference, so they keep their torch path on a CPU."""
    if not enabled:
        yield
        return
    from trl.trainer import utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if not callable(original):
        raise RuntimeError("loss_tokens_only = true needs trl.trainer.utils._use_triton (TRL 1.16's fused LM head), "
                           "which this TRL does not have: set loss_tokens_only = false")
    trl_utils._use_triton = lambda device: True
    try:
        yield
    finally:
        trl_utils._use_triton = original


HALF_DTYPES = (torch.bfloat16, torch.float16)


def master_weights_dtype(model, settings: TrainSettings) -> torch.dtype | None:
    """The half dtype a full fine-tuning's weights were loaded in (``dtype = "bfloat16"``, or ``auto`` on a bf16
    GPU), which ``_full_precision`` trains in fp32 and hands back in; None when nothing is cast (fp32 weights, LoRA,
    whose adapters peft keeps in fp32, or an accelerate launch with DeepSpeed, which keeps its own fp32 master copy,
    or FSDP, which shards the module). Trained as loaded, the weights and AdamW's state were bf16: an update under
    half a bf16 step (about 0.4% of a weight) rounded to nothing, nearly every update at the paper's DPO learning
    rate of 4e-7 (tests/test_training_precision.py checks the result equals an fp32 copy's training)."""
    if settings.lora:
        return None
    dtype = next(model.parameters()).dtype
    if dtype not in HALF_DTYPES:
        return None
    # Under `accelerate launch` with DeepSpeed or FSDP the engine wraps and shards the model: DeepSpeed keeps its own
    # fp32 master copy, and neither a module cast before sharding nor one of the wrapped module after is ours to
    # make. transformers' is_deepspeed_zero3_enabled() would only answer once the trainer's arguments exist, after
    # this is decided, so the launch's own environment says it.
    if any(os.environ.get(flag, "").lower() in ("1", "true") for flag in ("ACCELERATE_USE_DEEPSPEED",
                                                                          "ACCELERATE_USE_FSDP")):
        return None
    return dtype


@contextmanager
def _full_precision(model, settings: TrainSettings) -> Iterator[torch.dtype | None]:
    """Train ``model``'s half-precision weights as fp32 master weights (``master_weights_dtype``; the trainer's
    bf16 autocast still computes in bf16), yielding the dtype they go back to (``_finish`` casts them, a stopped
    training's too). A failed training leaves them in fp32: the caller's model is then thrown away."""
    half = master_weights_dtype(model, settings)
    if half is not None:
        model.float()
    yield half


@contextmanager
def _reference_in_fp32(ref_model, half: torch.dtype | None) -> Iterator[None]:
    """A frozen DPO reference loaded in ``half`` computes in fp32 while the policy trains fp32 master weights, and is
    handed back in ``half`` (exactly: its values are half values). DPO's reward is the policy's log-prob minus the
    reference's; a bf16 reference beside the fp32 policy it was loaded as gave them different rounding, so at step 0
    the rewards were not 0 (on the demo planner: 0.004 a pair at beta 0.1, ``rewards/accuracies`` 0.5 instead of 0,
    more on longer completions) and each step's loss carried that offset. The reference costs 4 bytes a parameter, as
    the fp32 policy's weights do (``engine.train_memory`` counts it)."""
    loaded = next(ref_model.parameters()).dtype if ref_model is not None else None
    cast = half is not None and loaded in HALF_DTYPES
    if cast:
        ref_model.float()
    try:
        yield
    finally:
        if cast:
            ref_model.to(loaded)


def _train(trainer, settings: TrainSettings) -> None:
    with loss_tokens_only(settings.loss_tokens_only):
        _quiet(trainer).train()


def _finish(trainer, settings: TrainSettings, half: torch.dtype | None = None):
    """The trained model: a LoRA run's ``PeftModel`` as it is when its adapter is what gets saved
    (``settings.save_adapter``), else plain weights (the adapter merged in); fp32 master weights back in the dtype
    ``half`` they were loaded in (the checkpoint keeps the size it had)."""
    model = trainer.model
    if settings.lora and not settings.save_adapter:
        model = model.merge_and_unload()
    if half is not None:
        model.to(half)
    model.eval()
    return model


SAMPLINGS = ("random", "group_by_length")


def micro_batch_args(settings: TrainSettings, micro_batches: int) -> dict[str, Any]:
    """The trainer arguments that cut each batch of ``settings.batch_size`` rows into ``micro_batches`` parts.

    transformers' ``batch_rebalance`` sampler shuffles the rows, takes ``batch_size x grad_accum`` of them per
    optimizer step, sorts them by length and splits them into ``grad_accum`` micro-batches of similar length (more
    short rows in one, fewer long ones in another). Given the run's seed (``_seeded_rebalance``) its shuffle is the
    ``torch.randperm`` seeded by seed + epoch that the ``random`` sampler draws, so the batches are ``random``'s.
    The gradients accumulate, and TRL divides each micro-batch's summed token loss by the token count of the whole
    batch (``num_items_in_batch``), so each step is the uncut batch's step up to float rounding; only the padding,
    which a CPU computes like real tokens, shrinks."""
    if micro_batches < 1 or settings.batch_size % micro_batches:
        raise ValueError(f"micro_batches {micro_batches}: expected a divisor of batch_size {settings.batch_size}")
    if micro_batches == 1:
        return {}
    return {"per_device_train_batch_size": settings.batch_size // micro_batches,
            "gradient_accumulation_steps": settings.grad_accum * micro_batches,
            "train_sampling_strategy": "batch_rebalance"}


def _seeded_rebalance(trainer_class):
    """``trainer_class`` whose ``batch_rebalance`` sampler shuffles with the run's seed: transformers builds it
    with its own default (42), so every seed would otherwise see the rows in one order."""

    from transformers.trainer_pt_utils import BatchRebalanceSampler

    class SeededRebalance(trainer_class):
        def _get_train_sampler(self, train_dataset=None):
            sampler = super()._get_train_sampler(train_dataset)
            if isinstance(sampler, BatchRebalanceSampler):
                sampler.seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return sampler

    return SeededRebalance


def sft_train(model, tokenizer, rows: list[dict[str, str]], settings: TrainSettings, *,
              on_log: LogSink | None = None, should_stop: Callable[[], bool] | None = None,
              sampling: str = "random", micro_batches: int = 1):
    """SFT with loss on the completion (+EOS) only. Returns ``(model, log_history)``. ``sampling`` is transformers'
    ``train_sampling_strategy``: ``random``, or ``group_by_length`` (batches of rows of similar length: less
    padding, which a CPU computes like real tokens, but a batch is no longer a random draw). ``micro_batches`` > 1
    keeps random batches and cuts each into that many parts of similar length (``micro_batch_args``): the same
    steps up to float rounding, with less padding; it replaces ``sampling``."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling {sampling!r}: expected one of {', '.join(SAMPLINGS)}")
    if micro_batches > 1 and sampling != "random":
        raise ValueError(f"micro_batches {micro_batches} draws random batches: it cannot be combined with {sampling}")
    device = next(model.parameters()).device
    with tempfile.TemporaryDirectory(prefix="moat-sft-") as out, _full_precision(model, settings) as half:
        common = {**_common_args(settings, device, out), "train_sampling_strategy": sampling}
        common.update(micro_batch_args(settings, micro_batches))
        args = SFTConfig(**common, completion_only_loss=True, packing=False)
        trainer_class = _seeded_rebalance(SFTTrainer) if micro_batches > 1 else SFTTrainer
        trainer = trainer_class(
            model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
            peft_config=_lora_config(settings) if settings.lora else None,
            callbacks=[StepHooks(on_log, should_stop)],
        )
        _train(trainer, settings)
        return _finish(trainer, settings, half), list(trainer.state.log_history)


def dpo_train(model, tokenizer, rows: list[dict[str, str]], settings: DPOSettings, *, ref_model=None,
              on_log: LogSink | None = None, should_stop: Callable[[], bool] | None = None):
    """DPO on ``prompt/chosen/rejected`` rows. Returns ``(model, log_history)``.

    The reference: with LoRA and no ``ref_model`` it is the base with the adapter switched off (no copy); with
    ``precompute_ref_log_probs`` the policy's own log-probs before training; otherwise ``ref_model`` or, when that is
    None, a frozen copy of ``model`` as it is now (the ``previous`` policy). A reference in bf16 or fp16 beside fp32
    master weights computes in fp32 and is handed back as it was given.
    """
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    device = next(model.parameters()).device
    needs_copy = ref_model is None and not settings.lora and not settings.precompute_ref_log_probs
    with (tempfile.TemporaryDirectory(prefix="moat-dpo-") as out, _full_precision(model, settings) as half,
          _reference_in_fp32(ref_model, half)):
        if needs_copy:  # after the cast: the copy computes as the policy does (_reference_in_fp32 says why)
            ref_model = copy.deepcopy(model).eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)
        losses, weights = [settings.loss_type], [1.0]
        if settings.sft_weight > 0:
            losses, weights = [settings.loss_type, "sft"], [1.0, settings.sft_weight]
        args = DPOConfig(**_common_args(settings, device, out), beta=settings.beta, loss_type=losses,
                         loss_weights=weights, precompute_ref_log_probs=settings.precompute_ref_log_probs,
                         ld_alpha=settings.ld_alpha if settings.ld_alpha < 1 else None)
        trainer = DPOTrainer(
            model=model, ref_model=ref_model, args=args, train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer, peft_config=_lora_config(settings) if settings.lora else None,
            callbacks=[StepHooks(on_log, should_stop)],
        )
        _train(trainer, settings)
        return _finish(trainer, settings, half), list(trainer.state.log_history)


def grpo_train(model, tokenizer, rows: list[dict[str, str]], settings: GRPOSettings, book, *,
               stop_token_ids: list[int] | None = None, on_log: LogSink | None = None,
               should_stop: Callable[[], bool] | None = None):
    """Online group RL on ``prompt/task_id`` rows with TRL's ``GRPOTrainer``. Returns ``(model, log_history)``;
    ``book.rollouts`` holds every rollout with its rewards and advantage. ``stop_token_ids`` end a rollout (the
    agent's end-of-turn tokens, ``engine.generation.stop_token_ids``). With ``settings.beta = 0`` TRL keeps no
    reference model; otherwise it is ``model`` as it starts (``_reference_as_the_policy``)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    device = next(model.parameters()).device
    common = _common_args(settings, device, "")
    common.pop("max_length")  # GRPO bounds the completion instead (max_completion_length)
    generation = {"eos_token_id": stop_token_ids} if stop_token_ids else None
    with tempfile.TemporaryDirectory(prefix="moat-grpo-") as out, _full_precision(model, settings) as half:
        common["output_dir"] = out
        args = GRPOConfig(**common, num_generations=settings.num_generations,
                          max_completion_length=settings.max_completion_length, temperature=settings.temperature,
                          top_p=settings.top_p, top_k=0, beta=settings.beta, epsilon=settings.epsilon,
                          epsilon_high=settings.epsilon_high, loss_type=settings.loss_type,
                          scale_rewards=settings.scale_rewards, mask_truncated_completions=settings.mask_truncated,
                          reward_weights=list(book.weights), generation_kwargs=generation, shuffle_dataset=True)
        trainer = GRPOTrainer(
            model=model, reward_funcs=book.funcs, args=args, train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer, peft_config=_lora_config(settings) if settings.lora else None,
            callbacks=[StepHooks(on_log, should_stop)],
        )
        _reference_as_the_policy(trainer, model)
        _train(trainer, settings)
        return _finish(trainer, settings, half), list(trainer.state.log_history)


def _reference_as_the_policy(trainer, model) -> None:
    """GRPO's KL reference holds the weights ``model`` starts from. TRL builds it by loading
    ``config._name_or_path`` again, which are other weights wherever the engine merged adapters into the model it
    trains (a role given as ``path`` + ``adapter``, an adapter checkpoint chain, ``agents.topology = shared``): the
    base, without them, so the KL term pulled the policy back towards the base. Its load is kept (its architecture
    and the patches TRL puts on it) and the policy's weights copied in, in the reference's own dtype."""
    if trainer.ref_model is None:  # beta = 0, or LoRA: the adapter switched off is the reference
        return
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    reference.load_state_dict(model.state_dict(), strict=True)
