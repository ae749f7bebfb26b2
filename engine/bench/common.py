"""Shared pieces of the benchmarks: timing side by side, the demo world, and models built from config.

``side_by_side(variants, repeats)`` runs every variant once per round, rounds ``repeats`` times, so a machine
whose speed drifts (2 shared cores) slows all variants alike; ratios are of medians. Models are built from a
``LlamaConfig`` with random weights when no trained agent is at hand: speed does not depend on the weights.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEMO_AGENTS = REPO / "assets" / "demo"


def side_by_side(variants: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, dict], dict[str, Any]]:
    """``({variant: {"median_s", "times_s"}}, {variant: last result})``; one untimed warm-up call each when
    ``repeats > 1`` (with one repeat the caller wants the cheapest run)."""
    results = {name: fn() for name, fn in variants.items()} if repeats > 1 else {}  # warm-up: lazy init, caches
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            started = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - started)
    return ({name: {"median_s": round(statistics.median(t), 4), "times_s": [round(x, 4) for x in t]}
             for name, t in times.items()}, results)


def ratio(timings: dict[str, dict], slow: str, fast: str) -> float:
    return round(timings[slow]["median_s"] / max(timings[fast]["median_s"], 1e-9), 3)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def demo_tasks(size: str):
    """Train tasks of the demo world (seeded, in memory)."""
    from engine.demo.world import WorldConfig, generate_suite

    config = WorldConfig.small()
    tasks = [t for t in generate_suite(config) if t.split == "train"]
    return tasks, generate_suite(config)


_TINY: dict[str, Path] = {}


def tiny_agents_dir() -> Path:
    """A tiny planner + grounder (hidden 32, 2 layers, a few SFT steps), built once per process in a temp dir."""
    if "dir" not in _TINY:
        from engine.demo.agents import AgentBuildConfig, build_demo_agents

        out = Path(tempfile.mkdtemp(prefix="moat-bench-agents-"))
        _, suite = demo_tasks("tiny")
        config = AgentBuildConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64, planner_steps=3,
                                  grounder_steps=3, batch_size=8, max_train_tasks=24)
        build_demo_agents(suite, out, config, log=lambda *_: None)
        _TINY["dir"] = out
    return _TINY["dir"]


def agents_dir(size: str) -> Path:
    """The committed demo agents for the default size when present, else the tiny build."""
    if size == "default" and (DEMO_AGENTS / "planner").is_dir() and (DEMO_AGENTS / "grounder").is_dir():
        return DEMO_AGENTS
    return tiny_agents_dir()


def load_agent(size: str, role: str, device: str):
    from engine import models
    from engine.turns import Agent

    model, tokenizer = models.load_model(models.ModelSpec(str(agents_dir(size) / role), dtype="float32",
                                                          device=device))
    return Agent(model, tokenizer)


# ~100M parameters with the demo vocabulary: 12 x (4 x 768^2 + 3 x 768 x 3072) = 113M in the blocks.
LLAMA_100M = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
LLAMA_TINY = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=384)


def llama_from_config(tokenizer, size: str, device: str, **shape):
    """A random-weight Llama for ``tokenizer``: ~100M parameters at ``default``, ~0.5M at ``tiny``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    dims = shape or (LLAMA_100M if size == "default" else LLAMA_TINY)
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=dims["num_attention_heads"],
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         **dims)
    return LlamaForCausalLM(config).to(device).eval()


def block_parameters(model) -> int:
    """Parameters touched per token in the transformer blocks + LM head (embedding lookups are free)."""
    emb = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    return total if tied else total - emb


def matmul_peak_flops(device: str, n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a large fp32 ``torch.matmul`` on this machine (the best of ``repeats``): the achievable peak."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - started)
    return 2 * n ** 3 / best
