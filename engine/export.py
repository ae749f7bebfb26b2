"""Export curated training data as files TRL and ``datasets`` load directly.

Contract:

* ``export_pairs(store, run_id, iteration, path, fmt)`` writes one TRL preference row per effective pair that is
  neither excluded nor a tie: ``{"prompt", "chosen", "rejected", "chosen_logppl", "rejected_logppl", "task_id",
  "step"}``; ``prompt`` is the stored planner prompt of the chosen plan (``plans.prompt``, the rendered chat the
  plan was sampled from), ``chosen``/``rejected`` the raw plan texts.
* ``export_sft(store, run_id, iteration, path, fmt)`` writes ``{"messages": [...], "task_id"}`` chat records from
  ``curation.effective_sft_records`` with ``prompts.grounder_messages(task, subgoals, [actions])``.
* ``export_rollouts(store, run_id, iteration, path, fmt)`` writes the GRPO rollouts of a
  ``stages.planner_objective = grpo`` iteration: ``{"prompt", "completion", "task_id", "batch", "n", "rewards",
  "reward", "advantage"}`` (``rewards``: each named reward as a JSON object text; ``prompt``: the planner prompt).
* ``fmt`` is ``"jsonl"`` or ``"parquet"``; files are written to a temp file and renamed into place, so a reader
  never sees half a file. Both return the number of rows written and load with
  ``datasets.load_dataset("json" | "parquet", data_files=path)``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.curation import effective_sft_records
from engine.prompts import grounder_messages
from engine.store import Store
from engine.views import EFFECTIVE_PAIRS_SQL

FORMATS = ("jsonl", "parquet")
PAIR_COLUMNS = ("prompt", "chosen", "rejected", "chosen_logppl", "rejected_logppl", "task_id", "step")

_PAIRS_SQL = """
SELECT pc.prompt AS prompt, pc.text AS chosen, pr.text AS rejected, e.chosen_logppl, e.rejected_logppl,
       e.task_id, e.step
FROM eff e
JOIN plans pc ON pc.run_id = $run AND pc.iteration = $it AND pc.task_id = e.task_id AND pc.step = e.step
    AND pc.k = e.chosen_k
JOIN plans pr ON pr.run_id = $run AND pr.iteration = $it AND pr.task_id = e.task_id AND pr.step = e.step
    AND pr.k = e.rejected_k
WHERE NOT e.excluded AND NOT e.tie
ORDER BY e.task_id, e.step, e.pair_idx
"""


def pair_rows(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The TRL preference rows ``export_pairs`` writes."""
    df = store.query(EFFECTIVE_PAIRS_SQL + _PAIRS_SQL, {"run": run_id, "it": iteration})
    return [
        {
            "prompt": r["prompt"],
            "chosen": r["chosen"],
            "rejected": r["rejected"],
            "chosen_logppl": float(r["chosen_logppl"]),
            "rejected_logppl": float(r["rejected_logppl"]),
            "task_id": r["task_id"],
            "step": int(r["step"]),
        }
        for r in df.to_dict("records")
    ]


def sft_rows(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The grounder chat records ``export_sft`` writes (onetime formulation)."""
    tasks: dict[str, Any] = {}
    rows = []
    for rec in effective_sft_records(store, run_id, iteration):
        task_id = rec["task_id"]
        if task_id not in tasks:
            tasks[task_id] = store.get_task(run_id, task_id)
        messages = grounder_messages(tasks[task_id], rec["subgoals"], [rec["actions"]])
        rows.append({"messages": messages, "task_id": task_id})
    return rows


def export_pairs(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl") -> int:
    rows = pair_rows(store, run_id, iteration)
    schema = pa.schema(
        [
            ("prompt", pa.string()),
            ("chosen", pa.string()),
            ("rejected", pa.string()),
            ("chosen_logppl", pa.float64()),
            ("rejected_logppl", pa.float64()),
            ("task_id", pa.string()),
            ("step", pa.int64()),
        ]
    )
    return _write(rows, path, fmt, schema)


def export_sft(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl") -> int:
    rows = sft_rows(store, run_id, iteration)
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("messages", pa.list_(message)), ("task_id", pa.string())])
    return _write(rows, path, fmt, schema)


def rollout_rows(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The rows ``export_rollouts`` writes, in the trainer's order."""
    frame = store.frame("rollouts", run_id, iteration)
    return [{"prompt": r.prompt, "completion": r.text, "task_id": r.task_id, "role": r.role, "batch": int(r.batch),
             "n": int(r.n),
             "rewards": r.rewards_json, "reward": None if r.reward != r.reward else float(r.reward),
             "advantage": float(r.advantage)} for r in frame.itertuples(index=False)]


def export_rollouts(store: Store, run_id: str, iteration: int, path: str | Path, fmt: str = "jsonl") -> int:
    schema = pa.schema([("prompt", pa.string()), ("completion", pa.string()), ("task_id", pa.string()),
                        ("role", pa.string()), ("batch", pa.int64()), ("n", pa.int64()), ("rewards", pa.string()),
                        ("reward", pa.float64()),
                        ("advantage", pa.float64())])
    return _write(rollout_rows(store, run_id, iteration), path, fmt, schema)


def _write(rows: list[dict[str, Any]], path: str | Path, fmt: str, schema: pa.Schema) -> int:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Temp file in the same folder so the rename is atomic (same filesystem).
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        if fmt == "jsonl":
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                _write_jsonl(rows, out)
        else:
            os.close(fd)
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(rows)


def _write_jsonl(rows: Iterable[dict[str, Any]], out: Any) -> None:
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
