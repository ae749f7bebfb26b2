"""Competing CPU load for ``python -m engine bench NAME --contention N``: the same benchmark measured quiet and then
while N other processes keep the CPU busy, side by side in one command.

Each competitor is a separate Python process multiplying 256x256 float32 matrices in a loop with one torch thread:
one busy core, the kind of work another training or sampling job does. They start before the contended
measurement and are stopped (SIGTERM, then SIGKILL) when it ends, whatever happens; nothing outlives the command.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

BURNER = ("import torch\ntorch.set_num_threads(1)\nx = torch.randn(256, 256)\n"
          "while True:\n    x = torch.tanh(x @ x)\n")


def _timings(report: dict) -> dict[str, float]:
    """Each variant's median and every top-level wall time (``iteration_s``, ``total_s``) of a report."""
    found = {name: v["median_s"] for name, v in (report.get("variants") or {}).items()
             if isinstance(v, dict) and isinstance(v.get("median_s"), (int, float))}
    found.update({key: value for key, value in report.items()
                  if key.endswith("_s") and isinstance(value, (int, float))})
    return found


@contextlib.contextmanager
def competing(n: int) -> Iterator[list[int]]:
    """Run ``n`` busy processes for the duration of the block; yields their pids."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", BURNER], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(max(0, n))]
    try:
        time.sleep(1.0 if procs else 0.0)  # let them import torch and start burning before anything is timed
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def with_contention(measure, n: int) -> dict:
    """``measure()`` (a benchmark report) quiet, then under ``n`` competitors; each median's slowdown and each
    ratio's quiet and contended values side by side."""
    quiet = measure()
    with competing(n):
        loaded = measure()
    slowdown = {}
    for name, timing in _timings(quiet).items():
        other = _timings(loaded).get(name)
        if timing and other:
            slowdown[name] = round(other / timing, 3)
    ratios = {key: {"quiet": value, "contended": (loaded.get("ratios") or {}).get(key)}
              for key, value in (quiet.get("ratios") or {}).items()}
    ok = quiet.get("correct", {}).get("ok", True) and loaded.get("correct", {}).get("ok", True)
    return {"contention": n, "quiet": quiet, "contended": loaded, "slowdown": slowdown, "ratios_side_by_side": ratios,
            "correct": {"ok": ok}}
