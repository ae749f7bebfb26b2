"""``bench train``: peak memory and step time of one DPO configuration per subprocess.

Variants (same model, same rows, same batch, fp32): ``lora`` (reference = adapter switched off), ``full_ref_copy``
(full fine-tuning with a frozen copy of the policy as reference), ``full_precomputed`` (full fine-tuning with
reference log-probs precomputed up front, no reference model kept). Memory method: each variant runs in a fresh
``python`` subprocess (torch allocations are invisible to ``tracemalloc``) and reports ``resource.getrusage``'s
max RSS (peak resident memory of the process) next to the RSS right after the model is built, so ``peak - base``
is what training added. Step time = wall time of ``dpo_train`` / steps (setup included, reported separately as
the trainer's own ``train_runtime``). ``default``: the ~100M Llama from config; ``tiny``: a ~0.5M one.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from engine.bench import common

SIZES = {"tiny": {"steps": 2, "batch_size": 2, "max_length": 96}, "default": {"steps": 3, "batch_size": 2,
                                                                             "max_length": 192}}
VARIANTS = ("lora", "full_ref_copy", "full_precomputed")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(variant: str, size: str, device: str, agents: str) -> dict:
    """One variant, in this (fresh) process."""
    from engine import models, prompts
    from engine.config import DPOSettings
    from engine.training import dpo_train

    sizes = SIZES[size]
    tokenizer = models.load_tokenizer(os.path.join(agents, "planner"))
    model = common.llama_from_config(tokenizer, size, device).train()
    tasks, _ = common.demo_tasks(size)
    rows = []
    for t in tasks[:sizes["steps"] * sizes["batch_size"] * 2]:
        prompt, chosen = prompts.prompt_and_completion(prompts.planner_messages(t, t.gold_subgoals))
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": chosen[: max(1, len(chosen) // 2)]})
    base = _rss_mb()
    settings = DPOSettings(max_steps=sizes["steps"], batch_size=sizes["batch_size"], max_length=sizes["max_length"],
                           learning_rate=1e-5, bf16="false", lora=variant == "lora",
                           precompute_ref_log_probs=variant == "full_precomputed", logging_steps=1)
    started = time.perf_counter()
    _, history = dpo_train(model, tokenizer, rows, settings)
    wall = time.perf_counter() - started
    runtime = next((h["train_runtime"] for h in history if "train_runtime" in h), None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"variant": variant, "parameters": sum(p.numel() for p in model.parameters()), "base_rss_mb": round(base),
            "peak_rss_mb": round(peak), "added_mb": round(peak - base), "wall_s": round(wall, 2),
            "step_s": round(wall / sizes["steps"], 3), "train_runtime_s": runtime}


def run(size: str, repeats: int, device: str) -> dict:
    agents = str(common.agents_dir(size))
    env = {**os.environ, "PYTHONPATH": str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    results = {}
    for variant in VARIANTS:  # one run per variant: each costs a process start and a model build
        code = (f"import json; from engine.bench.train import child; "
                f"print('RESULT ' + json.dumps(child({variant!r}, {size!r}, {device!r}, {agents!r})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=common.REPO)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            raise RuntimeError(f"train bench {variant} failed:\n{out.stderr[-3000:]}")
        results[variant] = json.loads(line[len("RESULT "):])
    lora, full = results["lora"], results["full_ref_copy"]
    return {
        "sizes": {**SIZES[size], "parameters": lora["parameters"]},
        "variants": results,
        "ratios": {
            "lora_peak_vs_full_ref_copy": round(lora["peak_rss_mb"] / full["peak_rss_mb"], 3),
            "lora_added_vs_full_ref_copy": round(lora["added_mb"] / max(full["added_mb"], 1), 3),
            "precomputed_peak_vs_full_ref_copy": round(results["full_precomputed"]["peak_rss_mb"]
                                                       / full["peak_rss_mb"], 3),
            "full_ref_copy_step_vs_lora": round(full["step_s"] / lora["step_s"], 3),
        },
        "memory_method": "getrusage max RSS per fresh subprocess; base = VmRSS after building the model",
        "correct": {"ok": all(r["peak_rss_mb"] > 0 for r in results.values())},
    }
