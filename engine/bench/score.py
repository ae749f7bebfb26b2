"""``bench score``: the grounder's PPL scorer, prefix-shared (``scoring.score_targets``) vs the baselines.

Workload: T demo tasks x K plans each (``world.planner_warm_start`` styles, so a realistic length mix), scored as
the ``score`` stage does (grounder prompt with the plan -> gold actions). Variants: ``prefix_shared`` (the engine),
``one_at_a_time`` (batch 1), ``arrival_batches`` (right-padded batches in the stage's order: the paper code's way),
``length_sorted`` (the previous engine). Reports per-variant computed/necessary tokens, tokens/s, and the fast
path's achieved FLOP/s (2 x parameters x computed tokens / time) as a fraction of a large fp32 matmul's FLOP/s on
the same machine. ``default`` scores with a ~100M-parameter Llama built from config (random weights: speed does
not depend on them); ``tiny`` with the tiny test grounder.
"""

from __future__ import annotations

from engine import prefix_cache, scoring
from engine.bench import common

SIZES = {"tiny": {"tasks": 4, "k": 4, "batch_size": 16}, "default": {"tasks": 3, "k": 15, "batch_size": 16}}


def workload(agent, tasks, k: int) -> tuple[list[str], list[str]]:
    from engine.demo.world import planner_warm_start
    from engine.turns import grounder_prompt

    rows = planner_warm_start(tasks, seed=0, draws=k)
    return [grounder_prompt(agent, t, s) for t, s, _ in rows], [t.actions_text for t, _, _ in rows]


def run(size: str, repeats: int, device: str) -> dict:
    from engine.turns import Agent

    sizes = SIZES[size]
    tasks, _ = common.demo_tasks(size)
    grounder = common.load_agent(size, "grounder", device)
    model = grounder.model if size == "tiny" else common.llama_from_config(grounder.tokenizer, size, device)
    agent = Agent(model, grounder.tokenizer)
    prompts, targets = workload(agent, tasks[:sizes["tasks"]], sizes["k"])
    tok, bs = agent.tokenizer, sizes["batch_size"]
    stats = {name: prefix_cache.KernelStats() for name in ("prefix_shared", "one_at_a_time", "arrival_batches",
                                                           "length_sorted")}

    def variant(name, fn):
        def call():
            stats[name] = prefix_cache.KernelStats()
            return fn(stats[name])
        return call

    variants = {
        "prefix_shared": variant("prefix_shared", lambda s: scoring.score_targets(
            model, tok, prompts, targets, batch_size=bs, fast=True, stats=s)),
        "one_at_a_time": variant("one_at_a_time", lambda s: scoring.score_targets_naive(
            model, tok, prompts, targets, batch_size=1, stats=s)),
        "arrival_batches": variant("arrival_batches", lambda s: scoring.score_targets_naive(
            model, tok, prompts, targets, batch_size=bs, order="arrival", stats=s)),
        "length_sorted": variant("length_sorted", lambda s: scoring.score_targets_naive(
            model, tok, prompts, targets, batch_size=bs, order="length", stats=s)),
    }
    timings, results = common.side_by_side(variants, repeats)
    reference = results["one_at_a_time"]
    max_diff = max(max(abs(a - b) for a, b in zip(results[name], reference)) for name in results)
    peak = common.matmul_peak_flops(device)
    params = common.block_parameters(model)
    for name, t in timings.items():
        s = stats[name]
        t.update(computed_tokens=s.computed, necessary_tokens=s.necessary, computed_over_necessary=round(s.ratio, 3),
                 forwards=s.forwards, necessary_tokens_per_s=round(s.necessary / t["median_s"], 1),
                 computed_tokens_per_s=round(s.computed / t["median_s"], 1))
    fast = timings["prefix_shared"]
    achieved = 2 * params * fast["computed_tokens"] / fast["median_s"]
    return {
        "sizes": {"pairs": len(prompts), "tasks": sizes["tasks"], "k": sizes["k"], "batch_size": bs,
                  "parameters": sum(p.numel() for p in model.parameters()), "block_parameters": params,
                  "mean_row_tokens": round(stats["one_at_a_time"].computed / len(prompts), 1)},
        "variants": timings,
        "ratios": {
            "prefix_shared_vs_one_at_a_time": common.ratio(timings, "one_at_a_time", "prefix_shared"),
            "prefix_shared_vs_arrival_batches": common.ratio(timings, "arrival_batches", "prefix_shared"),
            "prefix_shared_vs_length_sorted": common.ratio(timings, "length_sorted", "prefix_shared"),
            "arrival_batches_vs_one_at_a_time": common.ratio(timings, "one_at_a_time", "arrival_batches"),
        },
        "flops": {"matmul_peak_flops": round(peak), "achieved_flops": round(achieved),
                  "fraction_of_peak": round(achieved / peak, 3),
                  "method": "2 x block parameters x computed tokens / median time (attention FLOPs ignored); peak "
                            "= best of 5 fp32 1024x1024 torch.matmul"},
        "correct": {"max_abs_logppl_diff": max_diff, "ok": max_diff <= 1e-4},
    }
