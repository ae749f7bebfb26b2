"""``bench sample``: K plans per task with the prompt's prefill shared by its K samples vs the paper's K passes.

Variants: ``shared_prefill`` (``generation.generate``: one call per chunk, each prompt prefilled once), ``one_call``
(``generate_naive``: one ``model.generate`` with ``num_return_sequences=K``, which prefills each prompt K times),
``k_passes`` (K ``generate_naive`` calls with one sample each over the prompt list: the paper code's way).
``transformers_loop``: ``shared_prefill`` as it ran before ``engine.decode``: transformers' own ``generate`` loop on
its ``DynamicCache`` (every row decoded until the last one ends; the cache concatenated on every step).
Correctness: same number of well-formed plans as ``one_call`` with the same seed (the fast path consumes the RNG in
the same order, so the texts are in fact identical: ``same_texts``), and the texts of ``transformers_loop``
(``same_texts_as_transformers``).
"""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

from engine import generation, prefix_cache
from engine.bench import common

SIZES = {"tiny": {"tasks": 4, "k": 4, "max_new_tokens": 16}, "default": {"tasks": 16, "k": 15, "max_new_tokens": 96}}


@contextmanager
def transformers_loop():
    """``generation.generate`` on transformers' ``generate`` and ``DynamicCache``, as before ``engine.decode``."""
    from transformers import DynamicCache

    def dynamic_cache(model, capacity, data=None):
        return DynamicCache(ddp_cache_data=data, config=model.config) if data else DynamicCache(config=model.config)

    with mock.patch("engine.decode.supports", lambda _model: False), \
            mock.patch("engine.kv_cache.growing_cache", dynamic_cache):
        yield


def _on_transformers_loop(fn):
    def run():
        with transformers_loop():
            return fn()
    return run


def run(size: str, repeats: int, device: str) -> dict:
    from engine.turns import planner_prompt, read_plan

    sizes = SIZES[size]
    tasks, _ = common.demo_tasks(size)
    planner = common.load_agent(size, "planner", device)
    prompts = [planner_prompt(planner, t) for t in tasks[:sizes["tasks"]]]
    k = sizes["k"]
    config = generation.GenerationConfig(max_new_tokens=sizes["max_new_tokens"], temperature=1.0, top_p=0.95,
                                         num_return_sequences=k, batch_size=len(prompts))
    one = generation.GenerationConfig(**{**config.__dict__, "num_return_sequences": 1})
    m, tok = planner.model, planner.tokenizer

    def k_passes():
        outs = [generation.generate_naive(m, tok, prompts, one, seed=1000 + j) for j in range(k)]
        return [[outs[j][i][0] for j in range(k)] for i in range(len(prompts))]

    variants = {
        "shared_prefill": lambda: generation.generate(m, tok, prompts, config, seed=7, fast=True),
        "one_call": lambda: generation.generate_naive(m, tok, prompts, config, seed=7),
        "k_passes": k_passes,
        "transformers_loop": _on_transformers_loop(
            lambda: generation.generate(m, tok, prompts, config, seed=7, fast=True)),
    }
    timings, results = common.side_by_side(variants, repeats)
    well_formed = {name: sum(read_plan(t)[1] for texts in out for t in texts) for name, out in results.items()}
    stats = {}
    for name, fast in (("shared_prefill", True), ("one_call", False)):
        s = prefix_cache.KernelStats()
        generation.generate(m, tok, prompts, config, seed=7, fast=fast, stats=s)
        stats[name] = {"prefill_computed_tokens": s.computed, "prefill_necessary_tokens": s.necessary,
                       "computed_over_necessary": round(s.ratio, 3)}
    return {
        "sizes": {"tasks": len(prompts), "k": k, "max_new_tokens": sizes["max_new_tokens"],
                  "parameters": sum(p.numel() for p in m.parameters()), "agents": str(common.agents_dir(size))},
        "variants": {name: {**t, **stats.get(name, {}), "well_formed": well_formed[name]}
                     for name, t in timings.items()},
        "ratios": {"shared_prefill_vs_k_passes": common.ratio(timings, "k_passes", "shared_prefill"),
                   "shared_prefill_vs_one_call": common.ratio(timings, "one_call", "shared_prefill"),
                   "shared_prefill_vs_transformers_loop": common.ratio(timings, "transformers_loop",
                                                                       "shared_prefill")},
        "correct": {"samples_per_prompt": sorted({len(o) for o in results["shared_prefill"]}),
                    "same_well_formed": well_formed["shared_prefill"] == well_formed["one_call"],
                    "same_texts": results["shared_prefill"] == results["one_call"],
                    "same_texts_as_transformers": results["shared_prefill"] == results["transformers_loop"],
                    "ok": well_formed["shared_prefill"] == well_formed["one_call"]
                    and results["shared_prefill"] == results["transformers_loop"]
                    and all(len(o) == k for o in results["shared_prefill"])},
    }
