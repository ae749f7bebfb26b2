"""Whether one sampling call of a run fits in memory: a caution before the run starts, not a process killed later.

Contract: ``sampling_memory_caution(config)`` returns a caution (one line) when the attention cache of one generate
call of the sample stage -- ``sample.batch_size`` prompts x ``sample.k`` samples each, every row holding
``sample.max_new_tokens`` plus at least ``PROMPT_TOKENS_AT_LEAST`` prompt tokens -- would take more than
``SHARE`` of the memory of the planner's device (the machine's RAM on a CPU, the GPU's on CUDA), else None. The
estimate is a lower bound (prompts are often longer, and the model's weights and activations come on top), from the
planner's ``config.json`` (layers, key/value heads, head size) and the size of a value in the dtype the planner's
weights load in, which the cache is kept in (``engine.models.resolve_dtype``: ``auto`` is fp32 on a CPU and on a GPU
without native bf16, bf16 on one with; a configured ``planner.dtype`` as set). None as well when the planner's
config or the memory size cannot be read (a hub id not downloaded, a platform without ``sysconf``): a caution that
cannot be computed is not given. Iterations whose phase (``schedule.phases``) samples with other settings are each
checked; the largest call is named. The vLLM backend pages its own cache: no caution.

Found by an audit: ``sample.k = 5000`` on a 135M model ran 75 s and was killed by the kernel for 24 GB, with nothing
said before, and left a run whose config cannot change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.config import RunConfig

PROMPT_TOKENS_AT_LEAST = 64  # the Lumos planner instruction alone is longer
SHARE = 0.5  # of the device's memory, for the cache of one call (weights, activations and the rest share the other)


def sampling_memory_caution(config: RunConfig) -> str | None:
    """The caution for the largest sampling call of the run, or None (see the module docstring)."""
    from engine.schedule import iteration_config, skip_reason

    per_token = _cache_bytes_per_token(config.planner.path, config.planner.device, config.planner.dtype)
    available = _device_memory(config.planner.device)
    if per_token is None or not available:
        return None
    calls = []
    for iteration in range(1, config.run.iterations + 1):
        if skip_reason(config, iteration, "sample") is not None:
            continue
        sample = iteration_config(config, iteration).sample
        if sample.backend == "vllm":
            continue
        tokens = sample.max_new_tokens + PROMPT_TOKENS_AT_LEAST
        calls.append((sample.batch_size * sample.k * tokens * per_token, sample.batch_size, sample.k, tokens))
    if not calls:
        return None
    need, batch, k, tokens = max(calls)
    if need <= SHARE * available:
        return None
    gib = 2**30
    fits = int(SHARE * available // (k * tokens * per_token))  # prompts per call whose cache fits
    fix = (f"lower sample.batch_size (prompts per call) to {fits}" if fits else
           "lower sample.k: the samples of one prompt alone do not fit")
    return (f"sample.k = {k} x sample.batch_size = {batch}: {k * batch} sequences in one generate call, whose "
            f"attention cache alone needs at least {need / gib:.1f} GiB ({tokens} tokens each: sample.max_new_tokens "
            f"and a short prompt), over half of the planner's {available / gib:.1f} GiB "
            f"({'GPU' if _is_cuda(config.planner.device) else 'RAM'}): the process may be killed for memory; {fix}")


def _is_cuda(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device not in ("auto", "map"):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _bytes_per_value(dtype: str, device: str) -> int:
    """Bytes of one cached key or value: the cache is kept in the dtype the model's weights load in, decided as
    ``engine.models.load_model`` decides it (fp32 on a pre-Ampere GPU for ``auto``, or a configured float32)."""
    import torch

    from engine.models import resolve_device, resolve_dtype

    try:
        planner_device = resolve_device(device)
    except RuntimeError:  # a device string torch cannot parse: loading will say so; estimate on what _is_cuda reads
        planner_device = torch.device("cuda" if _is_cuda(device) else "cpu")
    return resolve_dtype(dtype, planner_device).itemsize


def _cache_bytes_per_token(path: str, device: str, dtype: str = "auto") -> int | None:
    """Bytes of keys and values one token adds to the cache, from the model's ``config.json`` (None: unreadable)."""
    try:
        found = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = found.get("text_config", found)  # a multimodal config nests the language model's
    layers, heads = found.get("num_hidden_layers"), found.get("num_attention_heads")
    hidden = found.get("hidden_size")
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads, hidden)):
        return None
    kv_heads = found.get("num_key_value_heads") or heads
    head_dim = found.get("head_dim") or hidden // heads
    return 2 * layers * kv_heads * head_dim * _bytes_per_value(dtype, device)


def _device_memory(device: str) -> int | None:
    """Bytes of memory of the device the planner samples on: the GPU's, or the machine's RAM."""
    if _is_cuda(device):
        import torch

        index = int(device.split(":", 1)[1]) if device.startswith("cuda:") else 0
        return int(torch.cuda.get_device_properties(index).total_memory)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
