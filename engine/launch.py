"""Run a training stage as an ``accelerate launch`` subprocess (``launch.mode = "accelerate"``).

The in-process trainer (engine/training.py called from engine/stages/train.py) stays the default. This module is
the other path, for DDP / DeepSpeed ZeRO / FSDP over several GPUs. Contract of ``run_training``:

- it writes, under ``<iteration dir>/launch/<stage>/``, the stage's training rows (``rows.jsonl``, one TRL row per
  line) and ``spec.json`` (trainer kind, the settings dataclass as a dict, the model/reference/tokenizer to load,
  the output directory, the log path; see ``engine.train_worker`` for the reader);
- it runs ``python -m accelerate.commands.launch --config_file C --num_processes N [extra] -m engine.train_worker
  spec.json`` (the same interpreter as the engine, so the same virtualenv) in its own process group, with stdout
  and stderr going to ``output.log`` there, and this process's torch threads split among the ranks as their
  ``OMP_NUM_THREADS`` unless it is set (``worker_environment``);
- while the subprocess runs it polls the worker's JSON-lines log every ``launch.poll_s`` seconds and hands each
  complete new line to ``on_log`` (the stage stores it in ``train_logs``: the studio's loss curves are live);
- when ``should_stop()`` turns true it terminates the whole process group (SIGTERM, SIGKILL after
  ``KILL_AFTER_S``) and raises ``StageStopped``: no checkpoint is recorded, as with the in-process trainer;
- a non-zero exit raises ``LaunchFailed`` carrying the tail of ``output.log``; success means the worker wrote the
  checkpoint (``config.json``, or an adapter checkpoint's ``moat_base.json``, in the output directory) and its
  ``done.json``.

It returns the number of log lines imported. Relative ``launch.accelerate_config`` paths resolve against the
working directory (the examples assume the repository root, like every other path in the example configs).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.config import LaunchSection, TrainSettings
from engine.errors import StageStopped

KILL_AFTER_S = 10.0  # SIGTERM grace before SIGKILL: torchrun forwards SIGTERM to its ranks, give them time to exit
TAIL_CHARS = 4000  # how much of the subprocess output a failure message carries


class LaunchFailed(RuntimeError):
    """The training subprocess exited non-zero (or without a checkpoint); the message ends with its output tail."""


@dataclasses.dataclass
class ModelRef:
    """A model the worker loads: checkpoint directory or hub id, optional LoRA adapter, dtype (config values)."""

    path: str
    adapter: str = ""
    dtype: str = "auto"


def write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def rank_steps(work_dir: Path) -> dict[int, int]:
    """``{rank: optimizer steps done}`` from the workers' progress files (``engine.train_worker.progress_hook``)."""
    steps = {}
    for path in work_dir.glob("rank*.progress.json"):
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # replaced while read: the next poll sees it
            continue
        steps[int(found["rank"])] = int(found["steps"])
    return dict(sorted(steps.items()))


class LogTail:
    """Reads the complete lines appended to a JSON-lines file since the last call (a half-written line waits)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return [json.loads(line) for line in data[:end].decode("utf-8").splitlines() if line.strip()]


def worker_environment(settings: LaunchSection, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The launched worker's environment: this process's, plus this checkout on ``PYTHONPATH`` (the worker imports
    ``engine`` from here even when the engine runs from elsewhere) and, unless ``OMP_NUM_THREADS`` is already set,
    this process's torch threads shared among the ranks. Without it each rank takes every core: beside the studio's
    web server, or after ``engine.threads`` lowered this process's threads for the load, that oversubscribes the
    cores (``engine.threads`` quotes 3-10x slower CPU work), and the worker's matmuls sum in a different order than
    the in-process trainer's would."""
    import torch

    env = dict(os.environ if environ is None else environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(max(1, torch.get_num_threads() // settings.num_processes))
    return env


def launch_command(settings: LaunchSection, spec_path: Path) -> list[str]:
    """The ``accelerate launch`` command line for a spec (the engine's own interpreter, so its virtualenv)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", settings.accelerate_config,
            "--num_processes", str(settings.num_processes), *settings.extra_args,
            "-m", "engine.train_worker", str(spec_path)]


def _tail(path: Path) -> str:
    if not path.exists():
        return "(no output)"
    text = path.read_text(encoding="utf-8", errors="replace")
    return text[-TAIL_CHARS:]


def _terminate(proc: subprocess.Popen) -> None:
    """End the subprocess and everything it started (accelerate -> torchrun -> one process per rank)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own group (start_new_session): only what we launched
        proc.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def run_training(*, stage: str, kind: str, work_dir: Path, output_dir: Path, rows: list[dict[str, str]],
                 settings: TrainSettings, model: ModelRef, reference: ModelRef | None, launch: LaunchSection,
                 on_log: Callable[[dict[str, Any]], None], should_stop: Callable[[], bool],
                 on_ranks: Callable[[dict[int, int]], None] | None = None) -> int:
    """Train ``model`` on ``rows`` in an ``accelerate launch`` subprocess; see the module docstring. ``on_ranks``
    receives ``{rank: optimizer steps done}`` for every worker whenever it changes."""
    if kind not in ("sft", "dpo"):
        raise ValueError(f"kind must be sft or dpo, not {kind!r}")
    work_dir.mkdir(parents=True, exist_ok=True)
    for name in ("rows.jsonl", "spec.json", "train_log.jsonl", "output.log", "done.json"):
        (work_dir / name).unlink(missing_ok=True)  # a re-run starts afresh
    for stale in work_dir.glob("rank*.progress.json"):
        stale.unlink()
    write_rows(work_dir / "rows.jsonl", rows)
    spec = {
        "stage": stage,
        "kind": kind,
        "settings": dataclasses.asdict(settings),
        "model": dataclasses.asdict(model),
        "reference": dataclasses.asdict(reference) if reference else None,
        "rows": str((work_dir / "rows.jsonl").resolve()),
        "output_dir": str(output_dir.resolve()),
        "log": str((work_dir / "train_log.jsonl").resolve()),
        "done": str((work_dir / "done.json").resolve()),
        "parent_pid": os.getpid(),  # the worker exits if this engine dies (see train_worker.parent_watch)
    }
    spec_path = work_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")

    env = worker_environment(launch)
    tail = LogTail(work_dir / "train_log.jsonl")
    imported, reported = 0, {}
    with (work_dir / "output.log").open("wb") as output:
        proc = subprocess.Popen(launch_command(launch, spec_path.resolve()), stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            while True:
                try:
                    proc.wait(timeout=launch.poll_s)
                    finished = True
                except subprocess.TimeoutExpired:
                    finished = False
                for log in tail.read():
                    on_log(log)
                    imported += 1
                ranks = rank_steps(work_dir)
                if on_ranks is not None and ranks and ranks != reported:
                    on_ranks(ranks)
                    reported = ranks
                if finished:
                    break
                if should_stop():
                    _terminate(proc)
                    raise StageStopped(f"{stage} stopped at the user's request (training subprocess terminated)")
        finally:
            _terminate(proc)  # an exception here (stop, store error, Ctrl-C) never leaves trainers running
    if proc.returncode != 0:
        raise LaunchFailed(f"{stage}: accelerate launch exited with status {proc.returncode}; see "
                           f"{work_dir / 'output.log'}. Last output:\n{_tail(work_dir / 'output.log')}")
    written = (output_dir / "config.json").exists() or (output_dir / "moat_base.json").exists()  # full or adapter
    if not written or not (work_dir / "done.json").exists():
        raise LaunchFailed(f"{stage}: the training subprocess exited 0 but wrote no checkpoint to {output_dir}. "
                           f"Last output:\n{_tail(work_dir / 'output.log')}")
    return imported
