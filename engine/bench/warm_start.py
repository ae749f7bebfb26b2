"""``bench warm_start``: the demo agents' warm-start SFT step (``demo-models``) five ways: TRL's own path (batches
drawn at random, every position scored: ``random``), the same batches with only the loss's tokens scored
(``TrainSettings.loss_tokens_only``, ``demo-models --loss-tokens-only``: ``loss_tokens``), that with each random
batch cut into 4 or 8 micro-batches of similar length whose gradients accumulate (``sft_train(micro_batches=)``,
``demo-models --micro-batches``: ``micro4``, ``micro8``), and batches of similar length
(``train_sampling_strategy = group_by_length``: ``grouped``).

On a CPU a padded token costs as much as a real one. The demo grounder's rows are 60-210 tokens long, so a random
batch of 32 is about 30% padding (the planner's about 45%). Every variant trains the same fresh model (the demo
agents' config, the committed tokenizer) on the same rows in fp32 for the same number of steps, through
``engine.training.sft_train`` exactly as ``demo-models`` does. Each round builds the model anew, so every variant
starts from the same weights. Reported per variant: seconds per step (median over rounds), the share of padding in
its batches (the first ``steps`` batches of the same transformers sampler) and the first and last logged loss (at
the default size the loss must fall alike in all). ``ratios`` are step-time ratios against ``random``
and ``loss_tokens``. ``loss_tokens`` trains on the same batches as ``random`` with the same loss up to float
rounding, so its losses must match ``random``'s to 1e-3; so must the micro-batch variants' (their sampler draws the
permutation the trainer's random sampler draws from the same seed, then cuts each batch by length: the same batches,
the same steps up to rounding). ``tiny`` uses the hidden-32 model of the tests, ``default``
the demo agents' size (3.9M).
"""

from __future__ import annotations

import math
import time

from engine.bench import common

SIZES = {"tiny": {"steps": 3, "batch_size": 8, "hidden": 32, "layers": 2, "rows": 128},
         "default": {"steps": 20, "batch_size": 32, "hidden": 256, "layers": 4, "rows": 3600}}
VARIANTS = {"random": ("random", False, 1), "loss_tokens": ("random", True, 1), "micro4": ("random", True, 4),
            "micro8": ("random", True, 8), "grouped": ("group_by_length", False, 1)}


def _padding_share(lengths: list[int], batches: list[list[int]]) -> float:
    real = sum(lengths[i] for b in batches for i in b)
    computed = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return round(1 - real / max(computed, 1), 4)


def _sampler_batches(strategy: str, lengths: list[int], batch_size: int, steps: int, seed: int,
                     micro_batches: int = 1) -> list[list[int]]:
    """The first ``steps`` batches (micro-batches: ``steps x micro_batches`` of them) the trainer's sampler would
    draw (transformers' own samplers, same seed)."""
    import torch
    from torch.utils.data import RandomSampler
    from transformers.trainer_pt_utils import BatchRebalanceSampler, LengthGroupedSampler

    if micro_batches > 1:
        sampler = BatchRebalanceSampler(lengths, effective_batch_size=batch_size, dp_size=1, grad_accum=micro_batches,
                                        seed=seed, drop_last=False)
        return list(sampler)[:steps * micro_batches]
    generator = torch.Generator().manual_seed(seed)
    if strategy == "group_by_length":
        sampler = LengthGroupedSampler(batch_size, lengths=lengths, generator=generator)
    else:
        sampler = RandomSampler(range(len(lengths)), generator=generator)
    order = list(sampler)
    return [order[i:i + batch_size] for i in range(0, min(len(order), steps * batch_size), batch_size)]


def run(size: str = "default", repeats: int = 3, device: str = "cpu") -> dict:
    from engine.config import TrainSettings
    from engine.demo.agents import AgentBuildConfig, _new_model, grounder_rows
    from engine.demo.world import WorldConfig, generate_suite
    from engine.models import load_tokenizer
    from engine.training import sft_train

    sizes = SIZES[size]
    if size == "tiny":
        tokenizer = load_tokenizer(str(common.tiny_agents_dir() / "grounder"))
        tasks = [t for t in generate_suite(WorldConfig.small()) if t.split == "train"]
    else:
        tokenizer = load_tokenizer(str(common.DEMO_AGENTS / "grounder"))
        tasks = [t for t in generate_suite() if t.split == "train"]
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in grounder_rows(tasks)][:sizes["rows"]]
    lengths = [len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) + 1 for r in rows]
    build = AgentBuildConfig(hidden_size=sizes["hidden"], layers=sizes["layers"])

    def train(strategy: str, tokens_only: bool, micro_batches: int) -> dict:
        model = _new_model(build, tokenizer).to(device)
        settings = TrainSettings(learning_rate=build.learning_rate, max_steps=sizes["steps"],
                                 batch_size=sizes["batch_size"], max_length=build.max_positions, seed=build.seed,
                                 logging_steps=1, warmup_steps=0.05, bf16="false", loss_tokens_only=tokens_only)
        started = time.perf_counter()
        _, history = sft_train(model, tokenizer, rows, settings, sampling=strategy, micro_batches=micro_batches)
        losses = [h["loss"] for h in history if "loss" in h]
        return {"seconds": time.perf_counter() - started, "first_loss": losses[0], "last_loss": losses[-1]}

    timings, results = common.side_by_side({name: (lambda v=v: train(*v)) for name, v in VARIANTS.items()}, repeats)
    report: dict = {"sizes": {**sizes, "mean_tokens": round(sum(lengths) / len(lengths), 1),
                              "max_tokens": max(lengths)}, "variants": {}}
    for name, (strategy, _, micro_batches) in VARIANTS.items():
        batches = _sampler_batches(strategy, lengths, sizes["batch_size"], sizes["steps"], build.seed, micro_batches)
        report["variants"][name] = {
            "median_s": timings[name]["median_s"], "times_s": timings[name]["times_s"],
            "step_s": round(timings[name]["median_s"] / sizes["steps"], 4),
            "padding_share": _padding_share(lengths, batches),
            "first_loss": round(results[name]["first_loss"], 4), "last_loss": round(results[name]["last_loss"], 4)}
    report["ratios"] = {f"random_vs_{name}": common.ratio(timings, "random", name) for name in VARIANTS
                        if name != "random"}
    report["ratios"].update({f"loss_tokens_vs_{name}": common.ratio(timings, "loss_tokens", name)
                             for name in ("micro4", "micro8")})
    plain = report["variants"]["random"]
    # Correct: grouping and micro-batches lower the padding they compute, every variant trained (finite losses; at
    # the default size the last logged loss is read beside the first: it must fall alike), and scoring the loss's
    # tokens only is the same training as TRL's path (same batches, same loss up to rounding), cut up or not.
    finite = all(math.isfinite(v[k]) for v in report["variants"].values() for k in ("first_loss", "last_loss"))
    same = all(abs(results[name][k] - results["random"][k]) < 1e-3
               for name in ("loss_tokens", "micro4", "micro8") for k in ("first_loss", "last_loss"))
    fewer_pads = all(report["variants"][name]["padding_share"] < plain["padding_share"]
                     for name in ("grouped", "micro4", "micro8"))
    report["correct"] = {"ok": fewer_pads and finite and same,
                         "loss_tokens_matches_random": same}
    return report
