"""The benchmark suite: ``python -m engine bench NAME --json [--size tiny|default] [--repeats N] [--device D]``.

Each module here (``score``, ``sample``, ``ground``, ``store``, ``train``, ``iteration``, ``curation``,
``warm_start``, ``floor``) exposes ``run(size, repeats, device) -> dict``: one JSON-able report with ``sizes``,
per-variant ``median_s`` (and all ``times_s``) over ``repeats``, ``ratios`` of variants measured side by side in the
same process and run, and a ``correct`` section checking the fast path against its baseline. Timings are reported,
never asserted (tests run every benchmark at ``size="tiny"`` and assert only correctness). Numbers measured here:
``RESULTS.md``.
"""

from __future__ import annotations

import importlib

BENCHMARKS = ("score", "sample", "ground", "store", "train", "iteration", "curation", "warm_start", "floor")
SIZES = ("tiny", "default")


def run(name: str, size: str = "default", repeats: int = 3, device: str = "cpu") -> dict:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (one of {', '.join(BENCHMARKS)})")
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}")
    module = importlib.import_module(f"engine.bench.{name}")
    report = module.run(size=size, repeats=max(1, int(repeats)), device=device)
    return {"benchmark": name, "size": size, "repeats": repeats, "device": device, "machine": machine(device),
            **report}


def machine(device: str) -> dict:
    """What the figures were measured on: the CPU's model, whether it computes bf16 natively, the cores this process
    may use and torch's threads (a figure means little without them)."""
    import torch

    from engine.kernel_cache import processor_name
    from engine.precision import native_bf16
    from engine.threads import usable_cores

    return {"cpu": processor_name("cpu"), "native_bf16_cpu": native_bf16(torch.device("cpu")),
            "usable_cores": usable_cores()[0], "torch_threads": torch.get_num_threads(),
            **({"gpu": torch.cuda.get_device_name(torch.device(device))} if device.startswith("cuda") else {})}
