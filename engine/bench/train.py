"""``bench train``: peak memory and step time of one DPO configuration per subprocess.

Variants (same model, same rows, same batch, fp32): ``lora`` (reference = adapter switched off), ``full_ref_copy``
(full fine-tuning with a frozen copy of the policy as reference), ``full_precomputed`` (full fine-tuning with
reference log-probs precomputed up front, no reference model kept). Memory method: each variant runs in a fresh
``python`` subprocess (torch allocations are invisible to ``tracemalloc``) and reports its peak resident memory
(``VmHWM``) next to the RSS right after the model is built, so ``peak - base``
is what training added. Step time = wall time of ``dpo_train`` / steps (setup included, reported separately as
the trainer's own ``train_runtime``). ``default``: the ~100M Llama from config; ``tiny``: a ~0.5M one.

Topology (``agents.topology``): the same model saved as a base with a LoRA adapter per role, then, each in a fresh
subprocess, both roles loaded and run once as the loop's stages hold them -- ``roles_separate`` (each role its chain
merged into its own copy: two bases in memory) and ``roles_shared`` (``engine.topology.SharedBase``: one base, both
adapters) -- with the same max-RSS method; ``shared_peak_vs_separate`` is the ratio (issue target <= 0.6).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from engine.bench import common

SIZES = {"tiny": {"steps": 2, "batch_size": 2, "max_length": 96}, "default": {"steps": 3, "batch_size": 2,
                                                                             "max_length": 192}}
VARIANTS = ("lora", "full_ref_copy", "full_precomputed")
ROLE_VARIANTS = ("roles_separate", "roles_shared")


def _rss_mb(key: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in MB.

    The peak is read from ``VmHWM``, not ``getrusage``'s max RSS: a subprocess inherits its parent's max RSS across
    fork and exec on Linux, so a child of a big parent would report the parent's peak as its own."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{key}:"):
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
    peak = _rss_mb("VmHWM")
    return {"variant": variant, "parameters": sum(p.numel() for p in model.parameters()), "base_rss_mb": round(base),
            "peak_rss_mb": round(peak), "added_mb": round(peak - base), "wall_s": round(wall, 2),
            "step_s": round(wall / sizes["steps"], 3), "train_runtime_s": runtime}


def roles_child(variant: str, store: str, device: str) -> dict:
    """Both roles loaded as ``variant`` arranges them (``roles_separate`` | ``roles_shared``), one forward each."""
    import peft  # noqa: F401 -- both variants load adapters through peft; its import alone is ~100 MB of RSS
    import torch

    from engine import models
    from engine.topology import SharedBase

    base = _rss_mb()  # the software stack, imported: what any process holding either arrangement pays first
    views = []
    if variant == "roles_shared":
        shared = SharedBase(models.ModelSpec(os.path.join(store, "base"), device=device))
        views = [shared.role_model(role, os.path.join(store, role))[0] for role in ("planner", "grounder")]
    else:
        views = [models.load_model(models.ModelSpec(os.path.join(store, role), device=device))[0]
                 for role in ("planner", "grounder")]
    torch.manual_seed(0)  # the same tokens in both subprocesses
    ids = torch.randint(3, 200, (2, 64), device=models.resolve_device(device))
    with torch.no_grad():
        sums = [float(view(input_ids=ids).logits.float().sum()) for view in views]
    peak = _rss_mb("VmHWM")
    held = shared.parameter_bytes() if variant == "roles_shared" else sum(
        p.numel() * p.element_size() for view in views for p in view.parameters())
    return {"variant": variant, "base_rss_mb": round(base), "peak_rss_mb": round(peak),
            "added_mb": round(peak - base), "weights_mb": round(held / 2**20), "logit_sums": sums}


def _role_checkpoints(size: str, device: str, agents: str, out: str) -> int:
    """Write the bench model as ``out/base`` and a random LoRA adapter per role on it, as a shared run saves them."""
    import torch
    from peft import LoraConfig, get_peft_model

    from engine import models

    tokenizer = models.load_tokenizer(os.path.join(agents, "planner"))
    model = common.llama_from_config(tokenizer, size, device)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(os.path.join(out, "base"), safe_serialization=True)
    tokenizer.save_pretrained(os.path.join(out, "base"))
    for seed, role in enumerate(("planner", "grounder"), start=1):
        base, _ = models.load_model(models.ModelSpec(os.path.join(out, "base"), device=device))
        torch.manual_seed(seed)
        lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                          init_lora_weights=False)  # random B: the roles really differ
        peft = get_peft_model(base, lora)
        models.save_adapter_checkpoint(peft, tokenizer, os.path.join(out, role), os.path.join(out, "base"))
    return parameters


def _in_subprocess(call: str, env: dict) -> dict:
    code = f"import json; from engine.bench.train import *; print('RESULT ' + json.dumps({call}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=common.REPO)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"train bench {call} failed:\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def roles(size: str, device: str, agents: str, env: dict) -> dict[str, dict]:
    """``roles_separate`` and ``roles_shared`` on the same base and adapters, each in a fresh subprocess."""
    with tempfile.TemporaryDirectory(prefix="moat-bench-roles-") as store:
        _role_checkpoints(size, device, agents, store)
        return {variant: _in_subprocess(f"roles_child({variant!r}, {store!r}, {device!r})", env)
                for variant in ROLE_VARIANTS}


def run(size: str, repeats: int, device: str) -> dict:
    agents = str(common.agents_dir(size))
    env = {**os.environ, "PYTHONPATH": str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    results = {}
    for variant in VARIANTS:  # one run per variant: each costs a process start and a model build
        results[variant] = _in_subprocess(f"child({variant!r}, {size!r}, {device!r}, {agents!r})", env)
    results.update(roles(size, device, agents, env))
    separate, shared = results["roles_separate"], results["roles_shared"]
    same = all(abs(a - b) <= 1e-3 * max(1.0, abs(a)) for a, b in zip(separate.pop("logit_sums"),
                                                                      shared.pop("logit_sums")))
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
            "shared_peak_vs_separate": round(shared["peak_rss_mb"] / separate["peak_rss_mb"], 3),
            "shared_added_vs_separate": round(shared["added_mb"] / max(separate["added_mb"], 1), 3),
            "shared_weights_vs_separate": round(shared["weights_mb"] / max(separate["weights_mb"], 1), 3),
        },
        "memory_method": ("peak RSS (VmHWM) per fresh subprocess; base = VmRSS after building the model (roles: "
                          "after importing torch, transformers and peft, before loading either)"),
        "correct": {"ok": all(r["peak_rss_mb"] > 0 for r in results.values()) and same,
                    "shared_outputs_equal_separate": same},
    }
