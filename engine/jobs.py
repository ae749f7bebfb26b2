"""Several runs of an experiment at once (``experiment --jobs N``): one worker process per run, one DuckDB file each.

Why processes and files: DuckDB lets one process open a file, and TRL/accelerate keep process-global state, so
trainers never run in threads of one process. The design:

* The parent (``python -m engine experiment``) keeps the main store open the whole time. It creates each run there
  (``engine.runner.ensure_run``: runs row, tasks, ``experiment_runs`` link), then copies the run's rows into the
  run's own job store ``<db-dir>/<db-stem>.jobs/<run_id>.duckdb`` (``Store.copy_run``, under a temporary name renamed
  into place, so a job file always holds its run) and starts a worker:
  ``python -m engine.job_worker --db <job file> --run <run_id> --iterations N``, which is ``run_loop`` on the job
  file, printing one JSON line per finished stage (the parent's progress bar) and a last ``end`` line. Its stderr
  goes to ``<run_id>.log`` beside the job file.
* Workers run in their own session with ``CUDA_VISIBLE_DEVICES=<gpu>`` (slot i of N takes the i-th visible GPU,
  round robin when N exceeds them) and ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/torch threads = max(1, cores // N),
  so N CPU workers do not oversubscribe the cores. ``PYTHONPATH`` points at this engine, so workers run the same code.
* Before any worker starts, ``check_launches`` looks at the training launches of the runs left to train: with GPUs,
  a variant whose ``[launch]`` runs ``accelerate launch`` over more processes than the one GPU a job sees is refused
  (``ConfigError`` naming the variant; its ranks would have no GPU of their own and the train stage would fail after
  the iteration's sampling and scoring); a fixed main process port -- ``--main_process_port`` in
  ``launch.extra_args``, or else ``main_process_port:`` in the accelerate config file ``launch.accelerate_config``
  names (0 or absent: a free port each launch) -- draws a caution (``warning: ...`` on stderr): concurrent jobs'
  launches would contend for it.
* When a worker exits (done, stopped or failed), the parent copies that run's rows -- every table with a ``run_id``
  column, the runs row included -- from the job file into the main store in ONE transaction (``ATTACH ...
  READ_ONLY``; ``DELETE`` + ``INSERT ... SELECT``). A finished run's job file and log are then deleted; an
  unfinished one's stay, and the next command resumes that file in place.
* Stop: Ctrl-C (SIGINT) sets the parent's flag; it starts no new worker and forwards SIGINT to the workers, whose
  ``run_loop`` stops after the batch in flight (stage ``stopped``, resumable); each is merged as it exits. A worker
  whose parent dies (killed) stops at its next check, so a re-run command finds its job file free to resume.
* ``absorb_job_files`` (``--jobs 1``) merges and deletes the job files a parallel command left, so the in-process
  runner continues those runs in the main store.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import engine
from engine.config import LaunchSection
from engine.config_checks import read_launch_file  # the pre-run checks' reader
from engine.errors import ConfigError
from engine.experiment import Experiment
from engine.job_worker import THREADS_ENV
from engine.preflight import warn
from engine.runner import OnRun, PlannedRun, RunResult, ensure_run, job_file, jobs_dir, linked_runs, units_left
from engine.store import Store


def visible_gpus() -> list[str]:
    """The CUDA devices this process may hand out (``CUDA_VISIBLE_DEVICES`` order), empty without CUDA."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in listed.split(",") if x.strip()] if listed else [str(i) for i in range(count)]
    return ids[:count]


def cpu_cores() -> int:
    """The cores the workers share: affinity, cgroup quota and OMP_NUM_THREADS (``engine.threads``)."""
    from engine.threads import usable_cores

    return usable_cores()[0]


def worker_env(slot: int, jobs: int, gpus: list[str]) -> dict[str, str]:
    """The environment of the worker in ``slot`` (0..jobs-1): its GPU, its share of the cores, this engine."""
    env = dict(os.environ)
    threads = str(max(1, cpu_cores() // jobs))
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, THREADS_ENV: threads})
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    root = str(Path(engine.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


# What one job's worker sees: ``worker_env`` gives each job one GPU (CUDA_VISIBLE_DEVICES) when there are any.
GPUS_PER_JOB = 1
# The stages that train through ``engine.launch`` when ``launch.mode = "accelerate"``.
LAUNCHED_STAGES = ("warm_start_planner", "warm_start_grounder", "train_planner", "train_grounder")


def _trains(plan: PlannedRun) -> bool:
    """Whether the plan's run has a training stage left (a plan without its unit list: whenever it has units)."""
    if not plan.todo:
        return plan.units > 0
    return any(stage in LAUNCHED_STAGES for _, stage in plan.todo)


def _port_argument(extra_args: list[str]) -> str | None:
    """The value ``extra_args`` gives ``--main_process_port`` (``--main_process_port N`` or ``=N``), None when it
    gives none."""
    for index, arg in enumerate(extra_args):
        name, sep, value = arg.partition("=")
        if name == "--main_process_port":
            return (value if sep else (extra_args[index + 1] if index + 1 < len(extra_args) else "")).strip()
    return None


def _fixed_port(launch: LaunchSection) -> tuple[str, str] | None:
    """``(port, where it is fixed)`` for a launch whose every run listens on one ``--main_process_port``, else None.
    The command line's ``launch.extra_args`` override the accelerate config file's ``main_process_port:`` (accelerate
    takes a file's setting only for an argument not given); 0, empty or absent: accelerate picks a free port."""
    given = _port_argument(launch.extra_args)
    if given is not None:
        return None if given in ("", "0") else (given, "launch.extra_args fixes --main_process_port")
    try:  # the file as the pre-run checks read it (engine.config_checks), which report one that does not parse
        settings = read_launch_file(launch.accelerate_config, "launch.accelerate_config", "accelerate config")
    except ConfigError:
        return None
    port = settings.get("main_process_port") if isinstance(settings, dict) else None
    if port is None or str(port).strip() in ("", "0"):
        return None
    return str(port).strip(), f"launch.accelerate_config {launch.accelerate_config} sets main_process_port:"


def check_launches(exp: Experiment, plans: list[PlannedRun], iterations: int, width: int,
                   gpus: list[str]) -> list[str]:
    """Refuse a variant whose training launch cannot run in a job: ``launch.mode = "accelerate"`` with
    ``launch.num_processes`` above the ``GPUS_PER_JOB`` a job sees (raises ``ConfigError`` naming the variant, as the
    experiment's own pre-run checks do). A refusal, not a caution: each rank trains on ``cuda:LOCAL_RANK``
    (``engine.train_worker``), which does not exist past the job's one GPU, so the train stage would certainly fail,
    after the iteration's sampling and scoring. Without GPUs nothing is pinned and CPU ranks need none. Returns the
    cautions: with ``width`` > 1 concurrent jobs, a fixed main process port, in ``launch.extra_args`` or in the
    accelerate config file (``_fixed_port``: their launches would contend for it; accelerate's switch to a free port
    when it finds the port taken races between launches that start together)."""
    cautions: list[str] = []
    checked: set[str] = set()
    for plan in plans:
        if plan.variant in checked or not _trains(plan):
            continue
        checked.add(plan.variant)
        launch = exp.run_config(plan.variant, plan.seed, iterations).launch
        if launch.mode != "accelerate":
            continue
        if gpus and launch.num_processes > GPUS_PER_JOB:
            raise ConfigError(f"variants.{plan.variant}", f"launch.num_processes: {launch.num_processes} training "
                                                          f"processes, but each of the experiment's jobs sees "
                                                          f"{GPUS_PER_JOB} GPU (CUDA_VISIBLE_DEVICES): the ranks past "
                                                          "it would have none and the train stage would fail after "
                                                          "the iteration's sampling and scoring. Run this experiment "
                                                          "with --jobs 1 (each launch then gets every GPU), or set "
                                                          f"launch.num_processes = {GPUS_PER_JOB}", str(exp.source))
        fixed = _fixed_port(launch) if width > 1 else None
        if fixed is not None:
            port, where = fixed
            cautions.append(f"{exp.source}: variants.{plan.variant}: {where} {port}: the training launches of "
                            f"{width} concurrent jobs may contend for it (a distributed launch listens on it); use "
                            "--main_process_port 0 in launch.extra_args or main_process_port: 0 in the accelerate "
                            "config (accelerate picks a free port), or leave it out")
    return cautions


def remove_job_file(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".wal"), path.with_suffix(".log")):
        leftover.unlink(missing_ok=True)


def merge(store: Store, run_id: str, path: Path) -> dict[str, int]:
    """Copy the run's rows from its job file into ``store`` (one transaction); the file stays."""
    Store(path).close()  # replays a killed worker's write-ahead log into the file before it is attached read-only
    return store.copy_run(run_id, path, into_this=True)


def seed_job_file(store: Store, run_id: str, path: Path) -> None:
    """A new job file holding the run's rows so far, made under a temporary name and renamed into place, so a kill
    never leaves a job file without its run."""
    partial = path.with_name(f"{path.stem}.partial{path.suffix}")
    remove_job_file(partial)
    Store(partial).close()  # the schema
    store.copy_run(run_id, partial, into_this=False)
    Store(partial).close()  # checkpointed: everything in the one file
    os.replace(partial, path)


def absorb_job_files(store: Store, experiment_id: str) -> list[str]:
    """Merge, then delete, every job file of the experiment's runs (before running them in-process)."""
    merged = []
    for run_id in linked_runs(store, experiment_id).values():
        path = job_file(store.path, run_id)
        if path.exists():
            merge(store, run_id, path)
            remove_job_file(path)
            merged.append(run_id)
    return merged


@dataclass
class _Active:
    plan: PlannedRun
    result: RunResult
    path: Path
    proc: subprocess.Popen
    started: float = field(default_factory=time.perf_counter)
    status: str | None = None  # from the worker's "end" line


def _read(slot: int, proc: subprocess.Popen, events: queue.Queue) -> None:
    for line in proc.stdout:
        events.put((slot, line))
    events.put((slot, None))


def run_parallel(store: Store, exp: Experiment, plans: list[PlannedRun], iterations: int, jobs: int, *,
                 on_start: OnRun = lambda name: None, on_unit: OnRun = lambda name: None,
                 should_stop: Callable[[], bool] = lambda: False) -> list[RunResult]:
    """Run ``plans`` in up to ``jobs`` worker processes (see the module docstring)."""
    gpus = visible_gpus()
    width = max(1, min(jobs, len(plans)))  # workers that can run at once: each gets cores // width threads
    for caution in check_launches(exp, plans, iterations, width, gpus):  # raises before any run is created
        warn(caution)
    if gpus and width > len(gpus):
        print(f"note: {width} jobs share {len(gpus)} GPU(s) (round robin)", file=sys.stderr)
    results = {id(p): RunResult(p.variant, p.seed, p.name, p.run_id, "not started", 0.0) for p in plans}
    todo = list(plans)
    active: dict[int, _Active] = {}
    events: queue.Queue = queue.Queue()
    signalled = False
    jobs_dir(store.path).mkdir(parents=True, exist_ok=True)
    while todo or active:
        while todo and len(active) < width and not should_stop():
            plan = todo.pop(0)
            result = results[id(plan)]
            slot = min(set(range(width)) - set(active))
            try:
                if _start(store, exp, plan, result, iterations, slot, width, gpus, active, events):
                    on_start(plan.name)
            except Exception as exc:  # this run cannot start (its job file is held, say); the others still run
                result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
                print(f"error: run {plan.name} ({result.run_id}) could not start: {result.error}", file=sys.stderr)
        if should_stop() and not signalled:
            signalled = True
            for run in active.values():
                run.proc.send_signal(signal.SIGINT)
        if not active:
            if should_stop():
                break
            continue
        try:
            slot, line = events.get(timeout=0.5)
        except queue.Empty:
            continue
        run = active[slot]
        if line is None:
            _finish(store, run, signalled)
            del active[slot]
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a library printed to stdout; the protocol lines are JSON
        if event.get("event") == "stage" and event.get("status") in ("done", "skipped"):
            on_unit(run.plan.name)
        elif event.get("event") == "end":
            run.status = event.get("status") or "failed"
    if not any(jobs_dir(store.path).iterdir()):
        jobs_dir(store.path).rmdir()
    return [results[id(p)] for p in plans]


def _start(store: Store, exp: Experiment, plan: PlannedRun, result: RunResult, iterations: int, slot: int,
           width: int, gpus: list[str], active: dict[int, _Active], events: queue.Queue) -> bool:
    """Prepare the plan's job file and start its worker; False when there was nothing to run."""
    run_id = result.run_id = ensure_run(store, exp, plan, iterations)
    path = job_file(store.path, run_id)
    if path.exists():
        with Store(path) as job:
            left = units_left(job, run_id, iterations)
        if not left:  # finished, but the command stopped before merging it
            merge(store, run_id, path)
            remove_job_file(path)
            result.status = "already done"
            return False
    elif plan.units == 0:
        result.status = "already done"
        return False
    else:
        seed_job_file(store, run_id, path)
    log = open(path.with_suffix(".log"), "a", encoding="utf-8")  # the worker's stderr
    cmd = [sys.executable, "-m", "engine.job_worker", "--db", str(path), "--run", run_id,
           "--iterations", str(iterations)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                env=worker_env(slot, width, gpus),
                                start_new_session=True)
    finally:
        log.close()  # the child holds its own descriptor
    active[slot] = _Active(plan, result, path, proc)
    threading.Thread(target=_read, args=(slot, proc, events), daemon=True).start()
    return True


def _finish(store: Store, run: _Active, stopping: bool) -> None:
    """Merge an exited worker's run; its ``end`` line decides the status (a SIGINT can still land while a finished
    worker's interpreter shuts down), else ``stopped`` when this command was stopping, else ``failed``."""
    rc = run.proc.wait()
    run.result.wall_s = time.perf_counter() - run.started
    status = run.status or ("stopped" if stopping and rc == -signal.SIGINT else "failed")
    merge(store, run.result.run_id, run.path)
    if status == "done":
        remove_job_file(run.path)
    elif status == "failed":
        log = run.path.with_suffix(".log")
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:] if log.exists() else ""
        run.result.error = f"worker exited with status {rc}; log {log}:\n{tail}"
        print(f"error: run {run.plan.name} ({run.result.run_id}) failed: {run.result.error}", file=sys.stderr)
    run.result.status = status
