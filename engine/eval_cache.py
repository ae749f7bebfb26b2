"""Evaluations kept for reuse: the same agents on the same tasks, settings, software and hardware are one measurement.

Contract:

* ``evaluation_key(config, planner_path, grounder_path, tasks)`` returns ``(key, None)``, the sha256 of everything an
  evaluation's result depends on, or ``(None, reason)`` when a result must not be reused: a remote QA model answers the
  QA actions (its answers may change), or the agents sit on one shared base (``agents.topology = shared``: a role is a
  chain of adapters, not one directory), or an agent is not on this disk (a hub id names no fixed weights).
  ``gold_plans=True`` (``planner_path`` then None) keys the grounder alone on the tasks' gold subgoals (the swap
  table's ``G{t}`` cells), which no planner evaluation can share. The key covers the agents' files
  (``engine.fingerprint``), every chosen task's full record in order, the ``[evaluate]`` section, both agent sections,
  the corpus's contents, this engine's source, the torch / transformers / tokenizers versions, torch's thread count (a
  CPU matmul's reduction order follows it), the CPU's vector capability and model name, and the CUDA device when there
  is one.
* ``StoredEvaluation``: metrics rows, trace rows, and where they were computed (the run, the iteration, and for a
  swap-table cell its name); ``from_traces`` builds one from ``engine.evaluate``'s summary and traces, ``summary()``
  and ``outcomes()`` read it back as the swap table holds a cell, ``origin()`` says where it came from.
* ``EvaluationCache(directory)``: ``get(key)`` returns the ``StoredEvaluation`` or None: missing, unreadable, or
  written by another format (then the caller evaluates and ``put`` rewrites it). ``put`` writes a gzip'd JSON file
  through a temporary name and a rename (``engine.export.replace_file``: the umask's mode, as ``open`` gives), so
  concurrent runs (an experiment's job workers) never read half an entry; two writers of one key write equal files.
  It raises ``OSError`` when the directory cannot be written; the stage then records why and goes on.
  ``for_workdir(workdir)`` is the cache of a config's ``run.workdir`` (``<workdir>/eval_cache/``).

Why: every run of an experiment starts from the same agents and is evaluated on the same fixed tasks, so its
iteration-0 evaluation is the same computation 20 times in the ablation preset (43-68 s each on 2 AMD EPYC cores,
about a tenth of a demo run). Greedy decoding and scoring are deterministic for fixed inputs, threads and kernels, so
a stored result equals a recomputation bit for bit (``tests/test_eval_cache.py`` checks it on real runs); anything
that could make them differ is in the key, and a key that misses only costs the evaluation. ``evaluate.reuse =
false`` evaluates every time. The swap table (``engine.swap``) keeps its computed cells here too: its ``G0`` cell (the
starting grounder on gold plans) is the same computation for every run of an experiment.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import RunConfig
from engine.evaluate import Trace, summary_from_rows, summary_rows
from engine.export import replace_file
from engine.fingerprint import fingerprint
from engine.kernel_cache import processor_name
from engine.tasks import Task

DIRECTORY = "eval_cache"
FORMAT = 1  # bump when the stored layout changes: older entries then read as missing


@dataclass
class StoredEvaluation:
    metrics: list[dict[str, Any]]  # {"split", "domain", "name", "value"}
    traces: list[dict[str, Any]]  # eval_traces rows without run_id / iteration
    run_id: str  # the run and iteration whose evaluation computed it
    iteration: int
    created_at: str = ""
    cell: str = ""  # a swap-table cell ("G0", "P3G0") computed after ``iteration``; "" for an evaluate stage

    @classmethod
    def from_traces(cls, summary: dict[str, dict[str, dict[str, Any]]], traces: list[Trace], run_id: str,
                    iteration: int, cell: str = "") -> StoredEvaluation:
        """An evaluation as ``engine.evaluate`` returns it (``summarize``'s metrics and the traces), for keeping."""
        return cls(metrics=summary_rows(summary),
                   traces=[{"task_id": t.task_id, "split": t.split, "domain": t.domain, "plan": t.plan,
                            "actions": t.actions, "answer": t.answer, "correct": t.correct,
                            "gold_logppl": t.gold_logppl, "trace_json": json.dumps(t.to_dict(), ensure_ascii=False)}
                           for t in traces],
                   run_id=run_id, iteration=iteration, cell=cell)

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """split -> domain -> metric, with the counts (``n``, ``correct``) as integers, as ``summarize`` gives."""
        return summary_from_rows(self.metrics)

    def outcomes(self) -> dict[str, bool]:
        return {row["task_id"]: bool(row["correct"]) for row in self.traces}

    def origin(self) -> str:
        where = f"{self.run_id} iteration {self.iteration}"
        return f"{where}, swap cell {self.cell}" if self.cell else where


@functools.cache
def engine_source_digest() -> str:
    """sha256 of this engine's Python source: a change to any module may change what an evaluation computes."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _software_and_hardware() -> dict[str, Any]:
    import tokenizers
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu": processor_name("cpu"), "cuda": processor_name("cuda") if cuda else None,
            "engine": engine_source_digest()}


def evaluation_key(config: RunConfig, planner_path: str | None, grounder_path: str, tasks: list[Task], *,
                   gold_plans: bool = False) -> tuple[str | None, str | None]:
    """``(key, None)``: a reusable evaluation of these agents on ``tasks`` under ``config``; else ``(None, why)``.
    ``gold_plans``: the grounder alone on the tasks' gold subgoals (``planner_path`` must be None)."""
    if (planner_path is None) != gold_plans or not grounder_path:
        raise ValueError("evaluation_key: a planner path exactly when gold_plans is false, and a grounder path")
    if config.tools.qa_model:
        return None, f"tools.qa_model = {config.tools.qa_model!r} answers QA actions remotely"
    if config.agents.topology == "shared":
        return None, "agents.topology = shared (a role is an adapter chain on one base)"
    agents: dict[str, Any] = {}
    for role, path in (("planner", planner_path), ("grounder", grounder_path)):
        if path is None:
            agents[role] = "gold subgoals"  # no planner: the keys of planner evaluations never match this one
            continue
        section = getattr(config, role)
        adapter = section.adapter if path == section.path else ""  # a run's checkpoint replaces the configured one
        for what in (path, adapter):
            if what and not Path(what).exists():  # a hub id: the hub may serve other weights under the same name
                return None, f"{role} {what!r} is not a local file or directory, so its contents cannot be hashed"
        agents[role] = {"files": fingerprint(path), "adapter": fingerprint(adapter) if adapter else None,
                        "section": dataclasses.asdict(section)}
    parts = {
        "format": FORMAT,
        "agents": agents,
        "tasks": [dataclasses.asdict(task) for task in tasks],
        "evaluate": dataclasses.asdict(config.evaluate),
        "corpus": fingerprint(config.tools.corpus) if config.tools.corpus else None,
        "environment": _software_and_hardware(),
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest(), None


class EvaluationCache:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json.gz"

    def get(self, key: str) -> StoredEvaluation | None:
        try:
            with gzip.open(self._path(key), "rt", encoding="utf-8") as source:
                data = json.load(source)
            if data.get("format") != FORMAT or data.get("key") != key:
                return None
            return StoredEvaluation(metrics=data["metrics"], traces=data["traces"], run_id=data["run_id"],
                                    iteration=int(data["iteration"]), created_at=data.get("created_at", ""),
                                    cell=str(data.get("cell", "")))
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: the caller evaluates and rewrites it

    def put(self, key: str, stored: StoredEvaluation) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "key": key, "run_id": stored.run_id, "iteration": stored.iteration,
                "cell": stored.cell,
                "created_at": stored.created_at or time.strftime("%Y-%m-%dT%H:%M:%S"),
                "metrics": stored.metrics, "traces": stored.traces}
        packed = gzip.compress(json.dumps(data, ensure_ascii=False).encode(), mtime=0)  # no clock in the bytes
        replace_file(self._path(key), "wb", lambda out: out.write(packed))


def for_workdir(workdir: str | Path) -> EvaluationCache:
    return EvaluationCache(Path(workdir) / DIRECTORY)
