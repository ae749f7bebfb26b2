"""Kernel choices measured once per model and machine, kept in a JSON file next to the runs.

Contract: ``KernelChoices(path)`` is a small persistent map. ``choice_key(kind, model, **shape)`` names everything a
timing depends on: the stage (``score`` / ``sample``), the model's architecture, size, dtype and device, the CPU's
(or GPU's) model name, torch's thread count and the workload's shape (batch size, K). ``get(key)`` returns the
stored record (``{"fast": bool, "seconds": {...}, "measured_at": ...}``) or None; ``put(key, fast, seconds)``
writes it through a temporary file and a rename, so a reader never sees half a file. A missing file is an empty
map; an unreadable one is reported by ``get``'s caller as "measured again" and rewritten, never fatal.

Why: ``score.calibrate`` / ``sample.calibrate`` time both kernels on a stage's first chunk. Doing that on every
stage run costs a chunk twice each time and lets a busy moment flip the kernel between runs; measured once per model
and machine (``recalibrate`` to measure again), the choice follows the hardware and stays put.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

FILE_NAME = "kernel_choices.json"


def processor_name(device_type: str = "cpu") -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the CUDA device's name."""
    if device_type == "cuda":
        import torch

        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def choice_key(kind: str, model, **shape: int) -> str:
    """``score|llama h256 l4 a4 v2058 float32 cpu|AMD EPYC|threads 2|batch_size 32``-like: what a timing depends on."""
    import torch

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    parameter = next(model.parameters())
    dims = " ".join(f"{name[0]}{getattr(config, attr, '?')}" for name, attr in (
        ("h", "hidden_size"), ("l", "num_hidden_layers"), ("a", "num_attention_heads"), ("v", "vocab_size")))
    device = parameter.device.type
    workload = " ".join(f"{name} {value}" for name, value in sorted(shape.items()))
    return "|".join([kind, f"{getattr(config, 'model_type', '?')} {dims} {str(parameter.dtype).removeprefix('torch.')}"
                     f" {device}", processor_name(device), f"threads {torch.get_num_threads()}", workload])


class KernelChoices:
    """The kernel choices in ``path`` (``<run.workdir>/kernel_choices.json``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> dict | None:
        record = self._read().get(key)
        return record if isinstance(record, dict) and isinstance(record.get("fast"), bool) else None

    def put(self, key: str, fast: bool, seconds: dict[str, float]) -> None:
        data = self._read()
        data[key] = {"fast": fast, "seconds": {name: round(value, 4) for name, value in seconds.items()},
                     "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def for_workdir(workdir: str | Path) -> KernelChoices:
    return KernelChoices(Path(workdir) / FILE_NAME)
