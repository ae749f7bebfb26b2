"""Loading causal LMs: a local directory or hub id (``ModelSpec``), with an optional LoRA adapter merged for
inference, on the device and in the precision the hardware supports natively; adapter checkpoints that name their
base (``moat_base.json``) and the chain of adapters behind one.

What the loop runs on a loaded model lives beside this module: ``engine.generation`` (sampling and greedy decoding)
and ``engine.scoring`` (the mean NLL of a target given its prompt). Which generation backend a stage uses (these
kernels or vLLM) is chosen in ``engine.generators``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import CheckpointError
from engine.precision import native_bf16

logger = logging.getLogger(__name__)


@dataclass
class ModelSpec:
    path: str  # local directory or hub id
    adapter: str | None = None  # LoRA adapter directory applied on top (merged for inference)
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16; auto = bf16 on a CUDA GPU with bf16, else fp32
    device: str = "auto"  # auto | cpu | cuda | cuda:N | map (accelerate device_map="auto")


def resolve_device(device: str = "auto") -> torch.device:
    """The device a model runs on; for ``map`` (spread by accelerate) the device of its first layers."""
    if device in ("auto", "map"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # bf16 weights only on a GPU that computes bf16 natively; CPU inference stays fp32
        return torch.bfloat16 if device.type == "cuda" and native_bf16(device) else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def load_tokenizer(path: str):
    """The tokenizer at ``path``; one without a pad token pads with EOS (logged), as TRL's trainers do.

    Padding positions are masked everywhere (scoring, generation, training), so the stand-in never changes a
    result; a tokenizer with neither a pad nor an EOS token raises ``CheckpointError`` (nothing could end a plan).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # many base LMs ship without one; EOS is the usual stand-in
        if tokenizer.eos_token is None:
            raise CheckpointError("<tokenizer>", f"{path}: the tokenizer has neither a pad token nor an EOS token; "
                                                 "add an EOS token (generation must be able to stop)")
        logger.warning("%s: the tokenizer has no pad token; padding with its EOS token %r", path, tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# In a run's adapter checkpoint: {"base": the model it was trained on, "base_adapter": that model's own configured
# LoRA adapter ("" for none; only the configured model has one, as in runtime.load_agent)}.
ADAPTER_BASE = "moat_base.json"


def is_adapter_checkpoint(path: str | Path) -> bool:
    """A run's LoRA checkpoint: an adapter (``adapter_config.json``) saying which model it was trained on."""
    return (Path(path) / ADAPTER_BASE).is_file()


def adapter_chain(path: str | Path) -> tuple[ModelSpec, list[str]]:
    """``(the full model, [adapter dirs, oldest first])`` behind a checkpoint path: an iteration's adapter names the
    model it started from, which may itself be the previous iteration's adapter."""
    adapters: list[str] = []
    current, base_adapter = str(path), ""
    while is_adapter_checkpoint(current):
        adapters.append(current)
        found = json.loads((Path(current) / ADAPTER_BASE).read_text(encoding="utf-8"))
        current, base_adapter = found["base"], found.get("base_adapter", "")
        if current in adapters:
            raise ValueError(f"{path}: the adapter checkpoints' bases form a loop")
    return ModelSpec(current, base_adapter or None), adapters[::-1]


def save_adapter_checkpoint(model, tokenizer, out: str | Path, base: str, base_adapter: str = "") -> None:
    """Write a trained ``PeftModel``'s adapter (not the base weights), the tokenizer and the model it applies to."""
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    write_adapter_base(out, base, base_adapter)


def write_adapter_base(out: str | Path, base: str, base_adapter: str = "") -> None:
    """Name the model an adapter checkpoint applies to (what makes the directory a loadable checkpoint)."""
    (Path(out) / ADAPTER_BASE).write_text(json.dumps({"base": str(base), "base_adapter": base_adapter or ""}),
                                          encoding="utf-8")


def merged(model, adapter: str):
    """``model`` with the LoRA ``adapter`` applied and merged into its weights (a plain model again, its weights
    trainable as ``from_pretrained`` leaves them: peft freezes the base it loads an adapter onto, and a role given as
    ``path`` + ``adapter`` then failed its first full fine-tuning with "element 0 of tensors does not require grad").
    peft reads transformers' deprecated ``is_gradient_checkpointing`` on the way, whose FutureWarning every ``merge``
    printed: it is the libraries' matter, not the user's, and is kept out of their terminal."""
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        plain = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return plain.requires_grad_(True)


def load_model(spec: ModelSpec, *, trainable: bool = False):
    """Return ``(model, tokenizer)``; an adapter is merged so inference runs on plain weights. ``spec.path`` may be an
    adapter checkpoint of a run: its chain back to the full model is loaded and merged in order."""
    from transformers import AutoModelForCausalLM

    if is_adapter_checkpoint(spec.path):
        base, adapters = adapter_chain(spec.path)
        model, _ = load_model(ModelSpec(base.path, base.adapter, spec.dtype, spec.device), trainable=False)
        for adapter in adapters:
            model = merged(model, adapter)
        model.train(trainable)
        return model, load_tokenizer(spec.path)
    device = resolve_device(spec.device)
    spread = spec.device == "map"  # accelerate places the layers (GPUs first, then CPU); never moved afterwards
    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=resolve_dtype(spec.dtype, device),
                                                 **({"device_map": "auto"} if spread else {}))
    if spec.adapter:
        model = merged(model, spec.adapter)
    if not spread:
        model.to(device)
    model.train(trainable)
    return model, load_tokenizer(spec.adapter or spec.path)
