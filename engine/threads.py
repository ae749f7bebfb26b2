"""How many CPU threads torch may use in this process, chosen from the cores it can really run on.

torch starts with as many intra-op threads as the machine has cores. In a container limited by a CPU quota, or next
to another process (the studio's job beside its web server, two experiment workers), that oversubscribes the cores
and every small forward pays for thread synchronisation (issue 17 measured 3-10x slower sampling and scoring).

* ``usable_cores()``: the affinity mask (``sched_getaffinity``), capped by the cgroup CPU quota (v2 ``cpu.max``,
  v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, rounded up), then by ``OMP_NUM_THREADS`` when set (an explicit
  setting wins). Each source is reported, so the run's log says why.
* ``apply_thread_policy(share=1, reserve=0)``: ``torch.set_num_threads(max(1, (cores - reserve) // share))`` for a
  process that shares the usable cores with ``share - 1`` equal others and leaves ``reserve`` cores to something
  else (a web server); returns the ``ThreadPolicy`` with its one-line description.
* ``adapt_to_load()``: called at each stage's start (``engine.loop.run_stage``): the first policy's threads less
  the cores other processes are busy on right now (``busy_elsewhere``: the median of a few reads of the kernel's
  runnable-task count, less this process's own runnable threads, scaled to our share of the machine when
  ``/proc/stat`` counts more CPUs than we may use). Measured on 2 cores with one CPU-bound process beside a demo
  iteration (``bench iteration --contention 1``): 2 torch threads 256 s, 1 thread 144 s (quiet, 2 threads: 97 s): a
  thread whose core is taken stalls every op of the other. An explicit ``OMP_NUM_THREADS`` (an experiment worker's
  share) is kept as it is.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadPolicy:
    threads: int  # torch intra-op threads set for this process
    cores: int  # usable cores (affinity, quota, OMP_NUM_THREADS)
    affinity: int
    quota: float | None  # cgroup CPU quota in cores, None when unlimited or unknown
    omp: int | None  # OMP_NUM_THREADS when set
    reserve: int = 0  # cores left to something else in this process (the studio's web server)
    busy: int | None = None  # cores other processes were busy on at the last adaptation (None: not adapted)

    def describe(self) -> str:
        quota = "none" if self.quota is None else f"{self.quota:g}"
        omp = "unset" if self.omp is None else str(self.omp)
        busy = "" if self.busy is None else f", {self.busy} busy elsewhere"
        return (f"torch threads {self.threads} of {self.cores} usable core(s) (affinity {self.affinity}, cgroup quota "
                f"{quota}, OMP_NUM_THREADS {omp}{busy})")


def affinity_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (``max`` or no file: None)."""
    try:
        v2 = (root / "cpu.max").read_text().split()
        if v2 and v2[0] != "max":
            return int(v2[0]) / int(v2[1] if len(v2) > 1 else 100_000)
        if v2:
            return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def _omp_threads() -> int | None:
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def usable_cores(root: Path = CGROUP_ROOT) -> tuple[int, int, float | None, int | None]:
    """``(cores, affinity, quota, omp)``: the cores this process may use and the three readings behind it."""
    affinity, quota, omp = affinity_cores(), cgroup_quota(root), _omp_threads()
    cores = affinity if quota is None else max(1, min(affinity, math.ceil(quota)))
    if omp is not None:
        cores = min(cores, omp)
    return cores, affinity, quota, omp


def apply_thread_policy(share: int = 1, reserve: int = 0, root: Path = CGROUP_ROOT) -> ThreadPolicy:
    """Set torch's intra-op threads for a process that shares the usable cores (see the module docstring)."""
    import torch

    cores, affinity, quota, omp = usable_cores(root)
    threads = max(1, (cores - max(0, reserve)) // max(1, share))
    torch.set_num_threads(threads)
    return ThreadPolicy(threads, cores, affinity, quota, omp, reserve=max(0, reserve))


def _own_running(tasks: Path) -> int:
    """This process's runnable threads (the reader at least): torch's pool may still spin after a stage."""
    running = 0
    for stat in tasks.glob("*/stat"):
        try:
            running += stat.read_text().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return max(1, running)


def busy_elsewhere(cores: int, samples: int = 5, interval_s: float = 0.01, stat: Path = Path("/proc/stat"),
                   own: Path = Path("/proc/self/task")) -> int | None:
    """Cores that other processes keep busy now: the median of ``samples`` reads of ``procs_running`` less this
    process's runnable threads, scaled by ``cores`` / the CPUs ``/proc/stat`` lists when it sees a bigger machine
    than ours; None when unreadable."""
    import statistics
    import time

    counts, cpus = [], 0
    for i in range(samples):
        try:
            text = stat.read_text()
        except OSError:
            return None
        running = [int(line.split()[1]) for line in text.splitlines() if line.startswith("procs_running ")]
        if not running:
            return None
        counts.append(max(0, running[0] - _own_running(own)))
        cpus = sum(1 for line in text.splitlines() if line.startswith("cpu") and line[3:4].isdigit())
        if i + 1 < samples:
            time.sleep(interval_s)
    others = statistics.median(counts)
    if cpus > cores:  # a host-wide count: our share of it
        others = others * cores / cpus
    return int(round(others))


def adapt_to_load(stat: Path = Path("/proc/stat")) -> ThreadPolicy:
    """Re-set torch's threads to the first policy's less the cores busy elsewhere now (module docstring)."""
    import torch

    base = ensure_thread_policy()
    if base.omp is not None:
        return base
    busy = busy_elsewhere(base.cores, stat=stat)
    threads = base.threads if busy is None else max(1, min(base.threads, base.cores - base.reserve - busy))
    torch.set_num_threads(threads)
    return ThreadPolicy(threads, base.cores, base.affinity, base.quota, base.omp, base.reserve, busy)


_applied: ThreadPolicy | None = None


def ensure_thread_policy(reserve: int | None = None) -> ThreadPolicy:
    """Apply the policy once per process and return it (later calls return the first one). The studio calls it at
    start with ``reserve`` = cores kept for its web server; every stage run calls it (``engine.loop.run_stage``).
    An experiment worker inherits ``OMP_NUM_THREADS`` = its share of the cores (``engine.jobs``)."""
    global _applied
    if _applied is None:
        _applied = apply_thread_policy(reserve=reserve or 0)
    return _applied
