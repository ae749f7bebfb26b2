"""A caution before a run whose in-process full fine-tuning cannot fit its device.

``training_memory_caution(config, role)`` returns a caution (a string naming the fields to change) when training
``role`` in the engine's own process with full weights needs more than the memory of the role's device, else None:

* the parameter count is read from the model's ``config.json`` (a local directory, or a hub id already in the
  Hugging Face cache: nothing is downloaded) for a Llama-style decoder (attention with its key/value heads, a gated
  MLP, embeddings tied or not): ``parameters_of``; a config without those fields gives no caution;
* full fine-tuning holds 16 bytes a parameter whatever the loaded dtype (``engine.training.master_weights_dtype``
  trains fp32 master weights: 4 for the weights, 4 for their gradients, 8 for AdamW's two moments), plus a frozen
  reference where the objective keeps one (DPO unless ``precompute_ref_log_probs``; GRPO with ``beta > 0``), 4 more:
  it computes in fp32 beside the fp32 policy (DPO: ``engine.training._reference_in_fp32``; GRPO: TRL loads it in
  the policy's dtype), before any activation;
* no caution for LoRA (``lora = true``), an ``accelerate`` launch (ZeRO and FSDP shard that state over GPUs), a
  role no iteration trains, or a device whose memory cannot be read.

Found by an audit of ``examples/paper.toml``: two 7B agents fully fine-tuned on one 80 GB GPU, which the planner's
DPO step alone (about 7B x 20 bytes = 135 GB) cannot fit; the run would have sampled and scored for hours first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.config import RunConfig

FULL_TRAINING_BYTES = 16  # fp32 weights 4 + gradients 4 + AdamW moments 8, per parameter
FP32_BYTES = 4  # a frozen reference, which computes in fp32 beside them
GIB = 2**30


def parameters_of(found: dict[str, Any]) -> int | None:
    """The parameter count of a Llama-style decoder from its ``config.json`` fields (None: fields missing)."""
    try:
        hidden, layers = int(found["hidden_size"]), int(found["num_hidden_layers"])
        heads, vocab = int(found["num_attention_heads"]), int(found["vocab_size"])
        inner = int(found.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError):
        return None
    kv_heads = int(found.get("num_key_value_heads") or heads)
    head_dim = int(found.get("head_dim") or hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q and o; k and v
    mlp = 3 * hidden * inner  # gate, up, down
    embeddings = vocab * hidden * (1 if found.get("tie_word_embeddings", False) else 2)
    return layers * (attention + mlp + 2 * hidden) + embeddings + hidden


def _model_config(path: str) -> dict[str, Any] | None:
    local = Path(path).expanduser() / "config.json"
    try:
        if local.is_file():
            return json.loads(local.read_text(encoding="utf-8"))
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")  # never the network
        return json.loads(Path(cached).read_text(encoding="utf-8")) if isinstance(cached, str) else None
    except (OSError, ValueError):  # unreadable, not JSON, or not a repo id the cache can name
        return None


def _training(config: RunConfig, role: str) -> tuple[str, Any] | None:
    """``(section name, settings)`` of the first iteration that fully fine-tunes ``role`` in this process (each
    iteration's phase settings applied: a curriculum may switch objective or LoRA), or None when none does. The
    skips are the loop's (``engine.loop.is_skipped``: the phase's stages, stage 1 or 2 off), read here without
    importing the loop, which imports this module through the preflight."""
    from engine.config_checks import grounder_training, planner_training
    from engine.schedule import iteration_config, skip_reason

    stage = f"train_{role}"
    for iteration in range(1, config.run.iterations + 1):
        phase = iteration_config(config, iteration)
        on = phase.stages.stage1 if role == "planner" else phase.stages.stage2
        if not on or skip_reason(config, iteration, stage) is not None or phase.launch.mode != "inprocess":
            continue
        name = planner_training(phase) if role == "planner" else grounder_training(phase)
        settings = getattr(phase, name)
        if not settings.lora:
            return name, settings
    return None


def training_memory_caution(config: RunConfig, role: str) -> str | None:
    """The caution for ``role``'s in-process full fine-tuning (see the module docstring), or None."""
    from engine.memory_check import _device_memory, _is_cuda

    training = _training(config, role)
    section = getattr(config, role)
    found = _model_config(section.path) if training else None
    parameters = parameters_of(found) if found else None
    available = _device_memory(section.device) if parameters else None
    if not available:
        return None
    name, settings = training
    keeps_reference = (not settings.precompute_ref_log_probs if name == "dpo"
                       else name.startswith("grpo") and settings.beta > 0)
    reference = parameters * FP32_BYTES if keeps_reference else 0
    need = parameters * FULL_TRAINING_BYTES + reference
    if need <= available:
        return None
    where = "GPU" if _is_cuda(section.device) else "RAM"
    with_reference = " and a frozen reference" if reference else ""
    return (f"{name}.lora = false: full fine-tuning of the {role} (about {parameters / 1e9:.2f}B parameters) needs "
            f"at least {need / GIB:.0f} GiB before activations (fp32 master weights, gradients and AdamW state"
            f"{with_reference}), more than the {available / GIB:.0f} GiB of its {where}: the train_{role} stage "
            f"would fail for memory after the iteration's sampling; set {name}.lora = true, or train over several "
            "GPUs with [launch] mode = \"accelerate\" and a ZeRO config (examples/gpu-8x.toml)")
