"""``bench floor``: how far one demo run is from what this machine's arithmetic allows.

Contract: ``run(size, repeats, device)`` runs the ``bench iteration`` workload (the iteration-0 evaluation and one
MOAT iteration; at ``default`` ``examples/demo.toml`` with the committed agents) twice in one process:

- **timed**: as ``bench iteration`` runs it, seconds per stage;
- **counted**: the same run on a fresh store under torch's ``FlopCounterMode``, which adds up every stage's
  floating-point work (matrix products and attention, forward and backward; element-wise work is left out). The
  counting slows the run down, so its times are not used; the two runs must reach the same evaluation metrics
  (``correct.same_metrics``: within a relative 1e-5, since counting moves training's float rounding), or the work
  counted is not the work timed.

This machine's fp32 matmul peak (``common.matmul_peak_flops``) is measured before and after the timed run; the
higher is used. Per stage the report gives the measured seconds, the GFLOP, the **floor** (GFLOP / peak: no kernel on
this machine does that work faster) and the efficiency (floor / measured). ``projection`` extends both to the demo's
full run (the iteration-0 evaluation and ``run.iterations`` iterations at iteration 1's cost) beside the 10-minute
budget of one run: a miss with a floor near the budget is work this CPU cannot do in time; a floor far below it is
time lost outside the arithmetic (Python, memory traffic, thin matrices, the sampler). Timings are reported, never
asserted.
"""

from __future__ import annotations

import torch

from engine.bench import common
from engine.bench.iteration import DEMO_CONFIG, run_workload

RUN_BUDGET_S = 600.0  # one full demo run (iteration-0 evaluation + 3 iterations), issue 12
METRIC_TOLERANCE = 1e-5  # relative: the counted run's metrics against the timed run's


def _attention_counts() -> dict:
    """FLOP formulas for the CPU's fused attention kernels, which torch's counter does not know (it counts the CUDA
    ones): the same arithmetic as its ``sdpa_flop_count`` and ``sdpa_backward_flop_count``."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_backward_flop_count(grad_out, query, key, value)

    return {aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}


def count_stage_flops(size: str, device: str):
    """The workload under ``FlopCounterMode``: ``(LoopResult, {"iteration:stage": flops})``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=_attention_counts())
    flops: dict[str, int] = {}
    seen = [0]

    def on_stage(iteration: int, stage: str, status: str) -> None:
        total = counter.get_total_flops()
        flops[f"{iteration}:{stage}"] = total - seen[0]
        seen[0] = total

    with counter:
        result = run_workload(size, device, on_stage)
    return result, flops


def _relative_difference(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return float("inf")  # a metric only one of the two runs computed
    return abs(a - b) / max(1.0, abs(a))


def _iterations_of_demo() -> int:
    from engine.config import load_config

    return load_config(DEMO_CONFIG, []).run.iterations


def run(size: str, repeats: int, device: str) -> dict:
    peak_before = common.matmul_peak_flops(device)
    timed = run_workload(size, device)
    peak_after = common.matmul_peak_flops(device)
    peak = max(peak_before, peak_after)
    counted, flops = count_stage_flops(size, device)

    stages = {}
    for name, seconds in timed.stages_s.items():
        work = flops.get(name, 0)
        floor = work / peak
        stages[name] = {"measured_s": seconds, "gflop": round(work / 1e9, 3), "floor_s": round(floor, 4),
                        "efficiency": round(floor / seconds, 3) if seconds > 0 else None}

    def summed(prefix: str, key: str) -> float:
        return sum(v[key] for k, v in stages.items() if k.startswith(prefix))

    iterations = _iterations_of_demo()
    measured = summed("0:", "measured_s") + iterations * summed("1:", "measured_s")
    floor = summed("0:", "floor_s") + iterations * summed("1:", "floor_s")
    # Counting changes the float rounding of training a little (gap log-PPLs after iteration 1 moved by ~1e-7 at
    # the default size, accuracies not at all), so metrics agree within a relative 1e-5, not bit for bit.
    keys = set(timed.metrics) | set(counted.metrics)
    differences = {key: _relative_difference(timed.metrics.get(key), counted.metrics.get(key)) for key in keys}
    same_metrics = bool(timed.metrics) and all(d <= METRIC_TOLERANCE for d in differences.values())
    return {
        "sizes": {"config": str(DEMO_CONFIG) if size != "tiny" else "tiny overrides",
                  "agents": str(common.agents_dir(size)), "train_limit": timed.config.data.train_limit,
                  "k": timed.config.sample.k},
        "matmul_peak_gflops": {"before": round(peak_before / 1e9, 1), "after": round(peak_after / 1e9, 1)},
        "stages": stages,
        "projection": {"iterations": iterations, "measured_s": round(measured, 1), "floor_s": round(floor, 3),
                       "budget_s": RUN_BUDGET_S},
        "ratios": {"measured_vs_floor": round(measured / floor, 2) if floor > 0 else None,
                   "budget_vs_floor": round(RUN_BUDGET_S / floor, 2) if floor > 0 else None},
        "correct": {"status": [timed.status, counted.status], "same_metrics": same_metrics,
                    "metrics_compared": len(keys),
                    "max_relative_metric_difference": max(differences.values(), default=0.0),
                    "every_stage_counted": set(flops) == set(timed.stages_s),
                    "ok": timed.status == counted.status == "done" and same_metrics
                    and set(flops) == set(timed.stages_s)},
    }
