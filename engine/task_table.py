"""The ``tasks`` table, as a mixin of ``Store``: a run's tasks written once when the run is created (``put_tasks``,
``task_rows``: the rows ``RunLedger.create_run`` writes in its own transaction) and read back as ``engine.tasks.Task``
objects (``get_tasks`` ordered by task id, optionally one split or domain and a limit; ``get_task``, a ``KeyError``
naming the run for an unknown id). JSON columns hold the lists and dicts; ``write`` encodes them.
Relies on the host's ``write``, ``_where`` and ``query``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.dbutil import loads, records
from engine.tasks import Task


class TaskTable:
    """A run's tasks in the store (see the module docstring)."""

    def put_tasks(self, run_id: str, tasks: Iterable[Task]) -> int:
        return self.write("tasks", self.task_rows(run_id, tasks))

    @staticmethod
    def task_rows(run_id: str, tasks: Iterable[Task]) -> list[dict[str, Any]]:
        """``tasks`` rows of a run (JSON columns as Python lists/dicts; ``write`` encodes them)."""
        return [
            {
                "run_id": run_id,
                "task_id": t.id,
                "domain": t.domain,
                "source": t.source,
                "split": t.split,
                "question": t.question,
                "context_json": list(t.context),
                "gold_subgoals_json": list(t.gold_subgoals),
                "gold_actions_json": list(t.gold_actions),
                "answer": t.answer,
                "meta_json": dict(t.meta),
            }
            for t in tasks
        ]

    @staticmethod
    def _task(row: dict[str, Any]) -> Task:
        return Task(
            id=row["task_id"],
            domain=row["domain"],
            source=row["source"],
            split=row["split"],
            question=row["question"],
            context=loads(row["context_json"], []),
            gold_subgoals=loads(row["gold_subgoals_json"], []),
            gold_actions=loads(row["gold_actions_json"], []),
            answer=row["answer"],
            meta=loads(row["meta_json"], {}),
        )

    def get_tasks(
        self, run_id: str, split: str | None = None, domain: str | None = None, limit: int | None = None
    ) -> list[Task]:
        """Tasks of a run ordered by task id, optionally one split/domain and at most ``limit``."""
        equals = {k: v for k, v in (("split", split), ("domain", domain)) if v}
        clause, params = self._where("tasks", run_id, None, equals)
        sql = f"SELECT * FROM tasks WHERE {clause} ORDER BY task_id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [self._task(r) for r in records(self.query(sql, params))]

    def get_task(self, run_id: str, task_id: str) -> Task:
        df = self.query("SELECT * FROM tasks WHERE run_id = ? AND task_id = ?", [run_id, task_id])
        if not len(df):
            raise KeyError(f"no task {task_id!r} in run {run_id!r}")
        return self._task(records(df)[0])
