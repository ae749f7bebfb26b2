"""``bench ground``: grounding many plans in one prefix-shared batched call vs one plan at a time.

Workload: T tasks x K plans (``planner_warm_start`` styles) rendered as grounder prompts, greedy decoding (the
groundings must then be identical). Variants: ``batched_shared`` (``generation.generate``: a task's plans share the
prompt prefix, computed once), ``batched`` (``generate_naive``, left-padded batches), ``one_at_a_time``.
"""

from __future__ import annotations

from engine import generation
from engine.bench import common
from engine.bench.score import workload

SIZES = {"tiny": {"tasks": 3, "k": 4, "max_new_tokens": 16}, "default": {"tasks": 4, "k": 15, "max_new_tokens": 96}}


def run(size: str, repeats: int, device: str) -> dict:
    sizes = SIZES[size]
    tasks, _ = common.demo_tasks(size)
    grounder = common.load_agent(size, "grounder", device)
    prompts, _ = workload(grounder, tasks[:sizes["tasks"]], sizes["k"])
    m, tok = grounder.model, grounder.tokenizer
    config = generation.GenerationConfig(max_new_tokens=sizes["max_new_tokens"], temperature=0.0, batch_size=16)
    single = generation.GenerationConfig(**{**config.__dict__, "batch_size": 1})
    variants = {
        "batched_shared": lambda: generation.generate(m, tok, prompts, config, fast=True),
        "batched": lambda: generation.generate_naive(m, tok, prompts, config),
        "one_at_a_time": lambda: generation.generate_naive(m, tok, prompts, single),
    }
    timings, results = common.side_by_side(variants, repeats)
    same = results["batched_shared"] == results["one_at_a_time"]
    return {
        "sizes": {"plans": len(prompts), "tasks": sizes["tasks"], "k": sizes["k"],
                  "max_new_tokens": sizes["max_new_tokens"], "agents": str(common.agents_dir(size))},
        "variants": timings,
        "ratios": {"batched_shared_vs_one_at_a_time": common.ratio(timings, "one_at_a_time", "batched_shared"),
                   "batched_shared_vs_batched": common.ratio(timings, "batched", "batched_shared")},
        "correct": {"same_groundings": same,
                    "differing": sum(a != b for a, b in zip(results["batched_shared"], results["one_at_a_time"])),
                    "ok": same},
    }
