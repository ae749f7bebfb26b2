"""Runs and their stage states, as a mixin of ``Store``: create and list runs (with their config snapshot), record
stage transitions (pending -> running -> done | failed | stopped | skipped, with timestamps, counts and errors), list
iterations, summarise a store for ``python -m engine status``, and copy one run's rows between two store files
(``copy_run``: how ``engine.jobs`` moves a run into and out of a job's own file). Stage timestamps are UTC (stored as
naive ``TIMESTAMP``): a stage's duration and ``report``'s busy time stay right across a daylight-saving change and in
a store merged from machines in other time zones. Run ids keep the local clock, which is what their reader knows.

A stage's time counts every span it ran: ``started_at`` .. ``finished_at`` is the latest span (what "running since"
and an ETA read) and ``earlier_s`` the seconds of the spans that ended before it (a stage stopped or failed and run
again, a critique judged again by ``step critique --retry-errors``); ``active_seconds(row)`` is their sum. A span
that never recorded its end (a killed process, SIGKILL) adds nothing: when it ended is not known. ``pending``, and
running a done or skipped stage again (a redo: its rows replace the first run's), start the stage afresh
(``earlier_s`` = 0).
Relies on the host's ``_cursor``, ``_transaction``, ``_touched``, ``_insert``, ``_frame_for``, ``task_rows``,
``query`` and ``_columns``.
"""

from __future__ import annotations

import difflib
import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from engine.config import ITERATION_STAGES
from engine.dbutil import CONFLICT_RETRIES, FINISHED, STAGE_STATUSES, TABLES, iso, loads, records, slug
from engine.errors import StoreError, UnknownRun
from engine.tasks import Task

# Where each stage sits in an iteration: iteration 0's warm start first, then a MOAT iteration's stages in the order
# engine.loop runs them.
STAGE_ORDER = ("warm_start_planner", "warm_start_grounder", *ITERATION_STAGES)
_PIPELINE_POSITION = {name: n for n, name in enumerate(STAGE_ORDER)}


def utc_now() -> datetime:
    """The current UTC time as a naive ``datetime``: what the ``stages`` table's ``TIMESTAMP`` columns hold."""
    return datetime.now(UTC).replace(tzinfo=None)


def active_seconds(row: dict[str, Any]) -> float | None:
    """A stage's time under way over every span it ran: ``earlier_s`` plus its latest span (``started_at`` ..
    ``finished_at``); None while the latest span has no end (running, killed, or never started)."""
    started, finished = row.get("started_at"), row.get("finished_at")
    if started is None or finished is None:
        return None
    return earlier_seconds(row.get("earlier_s")) + (finished - started).total_seconds()


def earlier_seconds(value: Any) -> float:
    """A stored ``earlier_s`` as seconds: NULL (a row no v7 code wrote; the column cannot be NOT NULL on DuckDB 1.x)
    or NaN (pandas' NULL) is 0."""
    return 0.0 if value is None or value != value else float(value)


class RunLedger:
    """Run and stage bookkeeping shared by the loop, the CLI and the studio."""

    # -- runs and stages ---------------------------------------------------------------------------------------

    def create_run(self, name: str, config: dict[str, Any], run_dir: str | Path, tasks: Iterable[Task] = (), *,
                   claim: Callable[[str], bool] | None = None) -> str:
        """Register a run and its ``tasks`` in one transaction; its id is ``<slug>-YYYYMMDD-HHMM`` (``-2``, ``-3``
        ... when taken). A kill mid-way leaves no run at all, never a run without its tasks (whose stages would
        resume to empty results).

        ``run_dir`` may contain ``{run_id}``, filled in with the new id (callers rarely know it beforehand).
        ``claim(candidate)`` is asked about each id this store has not taken, in order; False passes it over (the
        loop's claims the run's directory on disk: another store may have a run of that id in the same workdir).
        """
        tasks = list(tasks)
        base = f"{slug(name)}-{datetime.now().strftime('%Y%m%d-%H%M')}"
        config_json = json.dumps(config, ensure_ascii=False, default=str)

        def body(cur: duckdb.DuckDBPyConnection) -> str:
            rows = cur.execute("SELECT run_id FROM runs WHERE starts_with(run_id, ?)", [base]).fetchall()
            taken = {r[0] for r in rows}
            run_id = next(c for c in (base, *(f"{base}-{n}" for n in range(2, 10**6)))
                          if c not in taken and (claim is None or claim(c)))
            cur.execute(
                "INSERT INTO runs (run_id, name, config_json, run_dir) VALUES (?, ?, ?, ?)",
                [run_id, name, config_json, str(run_dir).replace("{run_id}", run_id)],
            )
            if tasks:
                self._insert(cur, "tasks", self._frame_for("tasks", self.task_rows(run_id, tasks)))
            return run_id

        with self._cursor() as cur:
            for _ in range(CONFLICT_RETRIES):  # another thread may take the same id between read and insert
                try:
                    return self._transaction(cur, body)
                except duckdb.ConstraintException as exc:
                    if "Duplicate key" not in str(exc):  # a bad task row, say: retrying with a new id cannot help
                        raise
                    continue
        raise StoreError(f"could not allocate a run id for {name!r}")

    @staticmethod
    def _run_dict(row: dict[str, Any]) -> dict[str, Any]:
        row = dict(row)
        row["config"] = loads(row.pop("config_json"), {})
        return row

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        df = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return self._run_dict(records(df)[0]) if len(df) else None

    def set_run_config(self, run_id: str, config: dict[str, Any]) -> None:
        """Replace run ``run_id``'s config snapshot (``engine.loop.set_iterations``: an explicit ``run --iterations``
        re-targets the run, the one field that may change after it was created); ``KeyError`` for an unknown run."""
        text = json.dumps(config, ensure_ascii=False, default=str)
        with self._cursor() as cur:
            found = self._transaction(cur, lambda c: c.execute(
                "UPDATE runs SET config_json = ? WHERE run_id = ? RETURNING run_id", [text, run_id]).fetchall())
        self._touched(["runs"])
        if not found:
            raise UnknownRun(self.unknown_run(run_id))

    def list_runs(self) -> list[dict[str, Any]]:
        return [self._run_dict(r) for r in records(self.query("SELECT * FROM runs ORDER BY created_at, run_id"))]

    def unknown_run(self, run_id: str, where: str = "this store") -> str:
        """The error for a run id this store lacks: "no run 'x' in <where>", then the ids it holds that start with
        ``run_id`` or are spelt close to it ("did you mean ..."), else the newest few it holds. A run id is long
        (name, seed, minute), and "ablations-full" or a mistyped minute is the usual slip."""
        ids = [str(r) for r in self.query("SELECT run_id FROM runs ORDER BY created_at DESC, run_id")["run_id"]]
        text = f"no run {run_id!r} in {where}"
        if not ids:
            return f"{text}; it holds no runs"
        near = ([i for i in ids if i.startswith(str(run_id))] if run_id else []) or difflib.get_close_matches(
            str(run_id), ids, n=3)  # (every id starts with "": an empty one gets the newest few instead)
        if near:
            return f"{text}; did you mean {', '.join(map(repr, near[:5]))}{' (and more)' if len(near) > 5 else ''}?"
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        return f"{text}; its runs, newest first: {', '.join(ids[:5])}{more}"

    def set_stage(
        self,
        run_id: str,
        iteration: int,
        stage: str,
        status: str,
        counts: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Record a stage transition: ``running`` stamps started_at (and clears the finish), adding the span that
        ended before it to ``earlier_s`` -- unless the stage was done or skipped: running it again is a redo (``step``
        on a finished stage), whose rows replace the first run's, so its time starts afresh. done/failed/stopped stamp
        finished_at when a span is open (a finished stage marked stopped, as ``step critique --retry-errors`` does,
        keeps the end it had: it did not run since); ``pending`` clears both and ``earlier_s``. ``counts`` and
        ``error`` replace the stored ones when given (error is cleared on a run).
        """
        if status not in STAGE_STATUSES:
            raise ValueError(f"stage status must be one of {', '.join(STAGE_STATUSES)}, got {status!r}")

        def body(cur: duckdb.DuckDBPyConnection) -> None:
            old = cur.execute(
                "SELECT status, started_at, finished_at, earlier_s, counts_json, error FROM stages "
                "WHERE run_id = ? AND iteration = ? AND stage = ?",
                [run_id, iteration, stage],
            ).fetchall()
            was, started, finished, earlier, counts_json, err = old[0] if old else (None, None, None, 0.0, None, None)
            earlier = earlier_seconds(earlier)
            now = utc_now()
            if status == "running":
                if was in ("done", "skipped"):  # a redo: the rows it writes replace the first run's
                    earlier = 0.0
                elif started is not None and finished is not None and finished >= started:
                    earlier += (finished - started).total_seconds()
                # (an open span, left by a killed process, has no known end: it adds nothing)
                started, finished, err = now, None, None
            elif status in FINISHED:
                if finished is None:
                    finished = now
            elif status == "pending":
                started = finished = None
                earlier = 0.0
            if counts is not None:
                counts_json = json.dumps(counts, ensure_ascii=False, default=str)
            if error is not None:
                err = error
            cur.execute(
                "INSERT OR REPLACE INTO stages (run_id, iteration, stage, status, started_at, finished_at, earlier_s, "
                "counts_json, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, iteration, stage, status, started, finished, earlier, counts_json, err],
            )

        with self._cursor() as cur:
            self._transaction(cur, body)

    def stage_status(self, run_id: str, iteration: int) -> dict[str, dict[str, Any]]:
        """``{stage: {"status", "started_at", "finished_at", "earlier_s", "seconds", "counts", "error"}}`` for one
        iteration, in pipeline order (``STAGE_ORDER``; a stage name outside it last, by start). ``started_at`` ..
        ``finished_at`` is the latest span, ``seconds`` the time over every span (``active_seconds``; None until the
        latest has ended). By start time alone, a skipped stage (never started) was listed after the evaluation that
        follows it, in ``status`` and in the studio."""
        df = self.query(
            "SELECT * FROM stages WHERE run_id = ? AND iteration = ? ORDER BY started_at NULLS LAST, stage",
            [run_id, iteration],
        )
        rows = sorted(records(df), key=lambda r: _PIPELINE_POSITION.get(r["stage"], len(_PIPELINE_POSITION)))
        return {
            r["stage"]: {
                "status": r["status"],
                "started_at": r["started_at"],
                "finished_at": r["finished_at"],
                "earlier_s": earlier_seconds(r["earlier_s"]),
                "seconds": active_seconds(r),
                "counts": loads(r["counts_json"], {}),
                "error": r["error"],
            }
            for r in rows
        }

    def _iteration_tables(self) -> list[str]:
        return [t for t in TABLES if "iteration" in self._columns[t] and "run_id" in self._columns[t]]

    def iterations(self, run_id: str) -> list[int]:
        """Every iteration that has a stage record or any row."""
        tables = self._iteration_tables()
        union = " UNION ".join(f'SELECT DISTINCT iteration FROM "{t}" WHERE run_id = $run' for t in tables)
        df = self.query(f"SELECT iteration FROM ({union}) ORDER BY iteration", {"run": run_id})
        return [int(i) for i in df["iteration"]]

    # -- copying a run between store files -------------------------------------------------------------------------

    def run_tables(self) -> list[str]:
        """The tables holding a run's rows (a ``run_id`` column), ``runs`` first; not ``experiment_runs``, which
        groups runs and belongs to the store that holds the experiment."""
        tables = [t for t in TABLES if "run_id" in self._columns[t] and t not in ("runs", "experiment_runs")]
        return ["runs", *tables]

    def copy_run(self, run_id: str, other: str | Path, *, into_this: bool) -> dict[str, int]:
        """Make one store's rows of ``run_id`` exactly the other's, in ONE transaction; returns rows copied per table.

        ``into_this=True`` reads ``other`` (attached READ_ONLY) and replaces the run's rows here; ``False`` replaces
        the run's rows in ``other`` with this store's. Every table with a ``run_id`` column is copied (deleted, then
        ``INSERT ... SELECT``), plus the critic cache (rows missing on the receiving side). ``other`` must be a store
        of the same schema version that no other process holds. Overrides get new ids on the receiving side (ids come
        from each file's own sequence), in their original order.
        """
        alias = f"moat_copy_{uuid.uuid4().hex[:12]}"
        quoted = str(other).replace("'", "''")
        tables = self.run_tables()
        src, dst = (f"{alias}.main.", "") if into_this else ("", f"{alias}.main.")

        def body(cur: duckdb.DuckDBPyConnection) -> dict[str, int]:
            copied = {}
            for table in tables:
                cols = [c for c in self._columns[table] if not (table == "overrides" and c == "override_id")]
                names = ", ".join(f'"{c}"' for c in cols)
                order = " ORDER BY override_id" if table == "overrides" else ""
                cur.execute(f'DELETE FROM {dst}"{table}" WHERE run_id = ?', [run_id])
                copied[table] = int(cur.execute(
                    f'INSERT INTO {dst}"{table}" ({names}) SELECT {names} FROM {src}"{table}" WHERE run_id = ?{order}',
                    [run_id]).fetchall()[0][0])
            cur.execute(f"INSERT OR IGNORE INTO {dst}critic_cache SELECT * FROM {src}critic_cache")
            return copied

        with self._cursor() as cur:
            cur.execute(f"ATTACH '{quoted}' AS {alias}{' (READ_ONLY)' if into_this else ''}")
            try:
                version = cur.execute(f"SELECT max(version) FROM {alias}.main.schema_info").fetchall()[0][0]
                if version != self.version:
                    raise StoreError(f"{other} has schema version {version}, this store {self.version}: open it "
                                     f"with this engine once to migrate it")
                copied = self._transaction(cur, body)
            finally:
                cur.execute(f"DETACH {alias}")
        if into_this:
            self._touched(tables)
        return copied

    # -- status ----------------------------------------------------------------------------------------------------

    def status_summary(self) -> dict[str, Any]:
        """``{"db", "schema_version", "runs": {run_id: {"run_id", "name", "created_at", "run_dir", "workdir",
        "directory", "tasks", "iterations": [{"iteration", "stages": {stage: {...}}, "rows": {table: n}, "evaluation":
        {split: {"accuracy", "ci95", "n", "gap_ppl"}}}]}}, "experiments": [{"experiment_id", "name", "runs"}]}``
        (runs in creation order; timestamps as ISO strings, so the whole thing is JSON-ready) for ``engine status``.
        ``workdir`` is the folder runs are made in (``run.workdir``; ``run_dir`` is its old name, the runs table's
        column) and ``directory`` the run's own below it. ``evaluation`` is each evaluated split over all domains
        (accuracy as a fraction with its Wilson interval), empty for an iteration not evaluated yet."""
        tables = self._iteration_tables()
        evaluation: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        wanted = ("accuracy", "accuracy_lo", "accuracy_hi", "n", "gap_ppl")
        metrics = self.query("SELECT run_id, iteration, split, name, value FROM metrics WHERE domain = 'all' AND "
                             f"name IN ({', '.join(repr(n) for n in wanted)}) ORDER BY split")
        for rid, it, split, name, value in metrics.itertuples(index=False):
            evaluation.setdefault((rid, int(it)), {}).setdefault(split, {})[name] = float(value)
        for per_split in evaluation.values():
            for split, got in per_split.items():
                per_split[split] = {"accuracy": got.get("accuracy"),
                                    "ci95": [got.get("accuracy_lo"), got.get("accuracy_hi")],
                                    "n": int(got["n"]) if "n" in got else None, "gap_ppl": got.get("gap_ppl")}
        union = " UNION ALL ".join(
            f"SELECT '{t}' AS tbl, run_id, iteration, count(*) AS n FROM \"{t}\" GROUP BY run_id, iteration"
            for t in tables
        )
        counts: dict[tuple[str, int], dict[str, int]] = {}
        for tbl, run_id, it, n in self.query(union).itertuples(index=False):
            counts.setdefault((run_id, int(it)), {})[tbl] = int(n)
        runs: dict[str, dict[str, Any]] = {}
        for run in self.list_runs():
            rid = run["run_id"]
            its = []
            for it in self.iterations(rid):
                stages = {
                    s: {**v, "started_at": iso(v["started_at"]), "finished_at": iso(v["finished_at"])}
                    for s, v in self.stage_status(rid, it).items()
                }
                rows = {t: counts.get((rid, it), {}).get(t, 0) for t in tables}
                its.append({"iteration": it, "stages": stages, "rows": rows,
                            "evaluation": evaluation.get((rid, it), {})})
            n_tasks = self.count("tasks", rid)
            runs[rid] = {
                "run_id": rid,
                "name": run["name"],
                "created_at": iso(run["created_at"]),
                "run_dir": run["run_dir"],  # the workdir, as the runs table names it (kept for scripts)
                "workdir": run["run_dir"],
                "directory": str(Path(run["run_dir"]) / rid),  # the run's own folder: config.toml, checkpoints
                "tasks": n_tasks,
                "iterations": its,
            }
        linked = self.query("SELECT e.experiment_id, e.name, count(x.run_id) AS runs FROM experiments e "
                            "LEFT JOIN experiment_runs x USING (experiment_id) GROUP BY ALL ORDER BY e.experiment_id")
        experiments = [{"experiment_id": r.experiment_id, "name": r.name, "runs": int(r.runs)}
                       for r in linked.itertuples(index=False)]
        return {"db": str(self.path), "schema_version": self.version, "runs": runs, "experiments": experiments}
