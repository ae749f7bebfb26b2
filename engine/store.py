"""The DuckDB store of a MOAT Studio workspace: every run, stage, plan, score, pair, verdict and override.

Contract:

* ``Store(path, read_only=False)`` opens (creating parent dirs) one DuckDB file and brings it to ``SCHEMA_VERSION``
  with ``schema.migrate``: ``schema.DDL_V1`` for a new file, ``schema.MIGRATIONS`` in order for older ones, all in one
  transaction (a failure or a kill leaves the file at its old version), and refuses newer ones
  (``StoreVersionError``, naming both versions). A file that is not a DuckDB database, or a DuckDB database without
  our ``schema_info`` table, raises ``StoreError`` and is left untouched. A file held by another process raises
  ``StoreLockedError`` (DuckDB allows one owning process; not even read-only readers may join). Use it as a
  context manager or call ``close()``. Every write commits before it returns, so what a caller was told is stored
  survives a kill of the process (DuckDB replays its write-ahead log on the next open).
* One DuckDB connection per Store; every public method works on its own ``cursor()`` so a worker thread and UI
  threads can share one Store. Writes run in one transaction each and are retried on "Conflict on update".
  ``serialized()`` holds the Store's lock around a read-then-append sequence (a curator override reads the
  current state it records as ``before_json``), so two threads never act on the same state.
* ``write(table, rows)`` / ``write_batch([(table, rows), ...], deletes=...)`` insert list-of-dict or DataFrame rows
  with ``INSERT OR REPLACE ... BY NAME`` from an Arrow-backed DataFrame (never row by row): writing the same keys
  twice leaves one row. Non-string values in ``*_json`` columns are JSON-encoded. Table and column names are
  checked against the schema; values only ever travel as parameters or DataFrames.
* Reads return plain Python (``dict``/``list``/``Task``) or pandas DataFrames; the studio's pages
  (``pairs_page``, ``task_plans``, ``verdict_queue``) paginate in SQL and carry a ``total`` column (rows matching
  the filters before LIMIT/OFFSET).
* Runs and stage states come from the ``RunLedger`` mixin (``engine.ledger``), a run's tasks from ``TaskTable``
  (``engine.task_table``); effective pairs and the studio's
  pages from the ``StudioViews`` mixin (``engine.views``), the critic queue's verdicts from ``VerdictViews``
  (``engine.verdict_views``); ``engine.curation`` defines the override semantics.
  The pairs page reads a materialised copy (``engine.pair_view``) kept fresh by ``generation``: every commit
  through this Store counts against the tables it touched.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from engine import schema
from engine.dbutil import (
    CONFLICT_RETRIES,
    TABLES,
    is_conflict,
    json_cell,
    number,
    records,
)
from engine.errors import StoreError, StoreLockedError
from engine.errors import StoreVersionError as StoreVersionError  # re-exported: callers catch it from here
from engine.ledger import RunLedger
from engine.pair_view import PairView
from engine.task_table import TaskTable
from engine.verdict_views import VerdictViews
from engine.views import StudioViews

Rows = list[dict[str, Any]] | pd.DataFrame


class Store(RunLedger, TaskTable, StudioViews, VerdictViews):
    """One DuckDB workspace file; see the module docstring for the contract."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path} does not exist (nothing to open read-only)")
        if self.path.is_dir():  # DuckDB said "IO Error: Could not read from file ...: Is a directory"
            raise StoreError(f"{self.path} is a folder, not a store file; use --db with a .duckdb file (a new name "
                             "creates a store)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreLockedError(
                    f"{self.path} is open in another process (the studio or a running job); "
                    f"stop it or use --db to pick another file ({exc})"
                ) from None
            if "not a valid DuckDB database" in str(exc):
                raise StoreError(
                    f"{self.path} is not a DuckDB database, so not a MOAT Studio store; use --db to pick another "
                    f"file ({exc})"
                ) from None
            raise StoreError(f"cannot open {self.path}: {exc}") from None
        except duckdb.CatalogException:  # a name DuckDB reads as another file type (say, x.jsonl)
            # DuckDB's own words ("Cannot launch in-memory database in read-only mode") only misled here.
            raise StoreError(
                f"{self.path} is not a DuckDB database, so not a MOAT Studio store; use --db to pick another file"
            ) from None
        except duckdb.ConnectionException as exc:
            # Same process, same file, other read_only setting: DuckDB shares one database instance per file.
            raise StoreError(
                f"{self.path} is already open in this process with other settings; share that Store ({exc})"
            ) from None
        opened = self._con.execute("SELECT file FROM pragma_database_list WHERE name = current_database()")
        if opened.fetchone()[0] is None:
            self._con.close()  # DuckDB reads some names (x.jsonl, x.csv) as other file types: an in-memory database
            raise StoreError(
                f"{self.path} is not a DuckDB database, so not a MOAT Studio store (DuckDB would keep nothing in it, "
                f"only in memory); use --db with a .duckdb file"
            )
        self._cursor_lock = threading.Lock()
        self._serial = threading.RLock()  # serialized(): read-then-append sequences (curator overrides)
        # Commits per table made through this Store (derived views compare them to know they are stale); one
        # process owns the file, so every write to it passes here.
        self._generations: dict[str, int] = {}
        self._inserted = threading.local()  # tables the current thread's transaction inserted into
        self._pair_view = PairView(self.query_arrow, self.generation)
        try:
            self.version = self._migrate()
            self._columns, self._keys = self._catalog()
        except BaseException:
            self._pair_view.close()
            self._con.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file. Under the cursor lock: a server thread still opening a cursor (an event queued when the
        studio was stopped) made a concurrent close fail with "connection is busy"; it now gets a closed-connection
        error of its own instead, and the file closes."""
        self._pair_view.close()
        with self._cursor_lock:
            self._con.close()

    @property
    def pair_view(self) -> PairView:
        """The materialised effective pairs behind ``pairs_page`` (``engine.pair_view``)."""
        return self._pair_view

    def generation(self, tables: Sequence[str]) -> tuple[int, ...]:
        """How many commits through this Store have touched each of ``tables`` (a derived view's staleness key)."""
        with self._cursor_lock:
            return tuple(self._generations.get(t, 0) for t in tables)

    def _touched(self, tables: Iterable[str]) -> None:
        """Count a commit (call AFTER it: a reader that sees the new generation must also see the rows)."""
        with self._cursor_lock:
            for table in set(tables):
                self._generations[table] = self._generations.get(table, 0) + 1

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._cursor_lock:  # cursor() itself touches shared connection state
            cur = self._con.cursor()
        try:
            yield cur
        finally:
            cur.close()

    @contextmanager
    def serialized(self) -> Iterator[None]:
        """Run a read-then-write sequence alone among this process's threads (re-entrant).

        DuckDB's snapshot isolation lets two transactions read the same state, and appends never conflict, so two
        curators swapping one pair at once would both swap the original; holding this lock makes the second see
        the first's override. One owning process per file (see the contract), so a process-local lock is enough.
        """
        with self._serial:
            yield

    def _migrate(self) -> int:
        """Create, upgrade or check the schema (``schema.migrate``); refuse any file this engine cannot own."""
        with self._cursor() as cur:
            return schema.migrate(cur, self.path, self.read_only, self._transaction)

    def _catalog(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Column and primary-key whitelists for the schema's tables, read from the file itself."""
        with self._cursor() as cur:
            cols = cur.execute(
                "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main' "
                "ORDER BY table_name, column_index"
            ).fetchall()
            keys = cur.execute(
                "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                "WHERE constraint_type = 'PRIMARY KEY' AND schema_name = 'main'"
            ).fetchall()
        columns: dict[str, list[str]] = {t: [] for t in TABLES}
        for table, column in cols:
            if table in columns:
                columns[table].append(column)
        return columns, {t: list(k) for t, k in keys if t in columns}

    # -- validation --------------------------------------------------------------------------------------------

    def columns(self, table: str) -> list[str]:
        """The columns of a schema table; any other name raises ``ValueError`` (names never come from users)."""
        if table not in self._columns:
            raise ValueError(f"unknown table {table!r} (tables: {', '.join(self._columns)})")
        return self._columns[table]

    def _check_columns(self, table: str, names: Iterable[str]) -> None:
        known = set(self.columns(table))
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(map(str, unknown))} for table {table}")

    def _where(self, table: str, run_id: str | None, iteration: int | None, equals: dict[str, Any]) -> tuple:
        """A parameterised WHERE clause over whitelisted column names."""
        filters = dict(equals)
        if run_id is not None:
            filters["run_id"] = run_id
        if iteration is not None:
            filters["iteration"] = iteration
        self._check_columns(table, filters)
        clause = " AND ".join(f'"{c}" = ?' for c in filters) or "TRUE"
        return clause, list(filters.values())

    # -- transactions and bulk writes --------------------------------------------------------------------------

    def _transaction(self, cur: duckdb.DuckDBPyConnection, body: Any) -> Any:
        """Run ``body(cur)`` in one transaction, retrying DuckDB's optimistic "Conflict on update" errors.

        Tables ``_insert`` wrote count as touched once the transaction ends (see ``generation``)."""
        self._inserted.tables = set()
        for attempt in range(CONFLICT_RETRIES):
            cur.execute("BEGIN TRANSACTION")
            try:
                result = body(cur)
                cur.execute("COMMIT")
                self._touched(self._inserted.tables)
                return result
            except Exception as exc:
                self._touched(self._inserted.tables)  # a failed commit may still have changed nothing: recheck
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has already ended the transaction
                if not is_conflict(exc) or attempt == CONFLICT_RETRIES - 1:
                    raise
                time.sleep(min(0.5, 0.01 * 2 ** attempt) * (0.5 + random.random()))  # backoff with jitter
        raise AssertionError("unreachable")

    def _frame_for(self, table: str, rows: Rows) -> pd.DataFrame:
        df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        self._check_columns(table, df.columns)
        for col in df.columns:
            if col.endswith("_json") and df[col].dtype == object:
                df[col] = df[col].map(json_cell)
        keys = [k for k in self._keys.get(table, []) if k in df.columns]
        if keys and len(keys) == len(self._keys[table]):
            # One statement may not touch a key twice; the last row for a key wins, as a second write would.
            df = df.drop_duplicates(subset=keys, keep="last")
        return df

    def _insert(self, cur: duckdb.DuckDBPyConnection, table: str, df: pd.DataFrame) -> int:
        if df.empty:
            return 0
        getattr(self._inserted, "tables", set()).add(table)
        view = f"_rows_{uuid.uuid4().hex}"
        cur.register(view, df)
        try:
            cur.execute(f'INSERT OR REPLACE INTO "{table}" BY NAME SELECT * FROM "{view}"')
        finally:
            try:
                cur.unregister(view)
            except duckdb.TransactionException:
                pass  # the INSERT failed and aborted the transaction: let its error, not this one, propagate
        return len(df)

    def write(self, table: str, rows: Rows) -> int:
        """Insert-or-replace ``rows`` into ``table`` in one transaction; returns the number of rows written."""
        return self.write_batch([(table, rows)])

    def write_batch(
        self, writes: Sequence[tuple[str, Rows]], deletes: Sequence[tuple[str, dict[str, Any]]] = ()
    ) -> int:
        """Apply ``deletes`` (``(table, {column: value})``, all equalities) then ``writes``, in ONE transaction.

        A stage rebuilding its rows passes its delete and its inserts together, so readers never see a half state.
        """
        frames = [(table, self._frame_for(table, rows)) for table, rows in writes]
        wheres = [(t, *self._where(t, None, None, f)) for t, f in deletes]
        if any(not f for _, f in deletes):
            raise ValueError("a delete needs at least one filter column")

        def body(cur: duckdb.DuckDBPyConnection) -> int:
            for table, clause, params in wheres:
                cur.execute(f'DELETE FROM "{table}" WHERE {clause}', params)
            return sum(self._insert(cur, table, df) for table, df in frames)

        try:
            with self._cursor() as cur:
                return self._transaction(cur, body)
        finally:  # also after a failed commit: a needless rebuild is cheap, a stale view is wrong
            self._touched([t for t, _ in writes] + [t for t, _ in deletes])

    def replace(self, table: str, run_id: str, iteration: int, rows: Rows, **equals: Any) -> int:
        """Delete a run-iteration's rows (narrowed by equal columns) and write ``rows`` instead, in one transaction."""
        filters = {"run_id": run_id, "iteration": iteration, **equals}
        return self.write_batch([(table, rows)], deletes=[(table, filters)])

    def delete(self, table: str, run_id: str, iteration: int | None = None, **equals: Any) -> int:
        """Delete the rows of a run (and iteration, and equal columns); returns how many went."""
        clause, params = self._where(table, run_id, iteration, equals)
        sql = f'DELETE FROM "{table}" WHERE {clause} RETURNING 1'
        try:
            with self._cursor() as cur:
                return self._transaction(cur, lambda c: len(c.execute(sql, params).fetchall()))
        finally:
            self._touched([table])

    def add_override(self, row: dict[str, Any]) -> int:
        """Append one curator override (see ``engine.curation``); returns its ``override_id``."""
        row = {k: (json_cell(v) if k.endswith("_json") else v) for k, v in row.items()}
        self._check_columns("overrides", row)
        names = ", ".join(f'"{c}"' for c in row)
        marks = ", ".join("?" for _ in row)
        sql = f"INSERT INTO overrides ({names}) VALUES ({marks}) RETURNING override_id"
        with self._cursor() as cur:
            return self._transaction(cur, lambda c: c.execute(sql, list(row.values())).fetchall()[0][0])

    # -- generic reads -----------------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pd.DataFrame:
        """Run a read query; values must be passed as ``params`` (``?`` or ``$name``), never formatted in."""
        with self._cursor() as cur:
            return cur.execute(sql, params if params is not None else []).df()

    def query_arrow(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pa.Table:
        """``query`` as an Arrow table: SQL types survive (an all-NULL text column stays text, not object)."""
        with self._cursor() as cur:
            return cur.sql(sql, params=params).to_arrow_table()

    def frame(self, table: str, run_id: str, iteration: int | None = None, **equals: Any) -> pd.DataFrame:
        """All rows of ``table`` for a run (and iteration, and equal columns), ordered by primary key."""
        clause, params = self._where(table, run_id, iteration, equals)
        order = ", ".join(f'"{k}"' for k in self._keys.get(table, [])) or "1"
        return self.query(f'SELECT * FROM "{table}" WHERE {clause} ORDER BY {order}', params)

    def count(self, table: str, run_id: str, iteration: int | None = None, **equals: Any) -> int:
        clause, params = self._where(table, run_id, iteration, equals)
        with self._cursor() as cur:
            return int(cur.execute(f'SELECT count(*) FROM "{table}" WHERE {clause}', params).fetchall()[0][0])

    def keys_done(
        self, table: str, run_id: str, iteration: int, cols: Sequence[str] = ("task_id", "step")
    ) -> set[tuple]:
        """Distinct ``cols`` tuples already stored: what a resumed stage can skip."""
        self._check_columns(table, cols)
        clause, params = self._where(table, run_id, iteration, {})
        names = ", ".join(f'"{c}"' for c in cols)
        with self._cursor() as cur:
            return set(cur.execute(f'SELECT DISTINCT {names} FROM "{table}" WHERE {clause}', params).fetchall())

    # -- training logs, metrics, checkpoints ---------------------------------------------------------------------

    def add_train_logs(self, run_id: str, iteration: int, stage: str, logs: Sequence[dict[str, Any]]) -> int:
        """Append trainer log dicts; ``seq`` continues after the stored ones, ``step`` is ``logs["step"]`` (or
        ``global_step``, else the seq), ``epoch``/``loss`` are copied when present, the whole dict goes to logs_json.
        """

        def body(cur: duckdb.DuckDBPyConnection) -> int:
            last = cur.execute(
                "SELECT coalesce(max(seq), -1) FROM train_logs WHERE run_id = ? AND iteration = ? AND stage = ?",
                [run_id, iteration, stage],
            ).fetchall()[0][0]
            rows = []
            for seq, log in enumerate(logs, start=last + 1):
                rows.append(
                    {
                        "run_id": run_id,
                        "iteration": iteration,
                        "stage": stage,
                        "seq": seq,
                        "step": int(log.get("step", log.get("global_step", seq))),
                        "epoch": number(log.get("epoch")),
                        "loss": number(log.get("loss")),
                        "logs_json": json.dumps(log, ensure_ascii=False, default=str),
                    }
                )
            return self._insert(cur, "train_logs", pd.DataFrame(rows, columns=self.columns("train_logs")[:-1]))

        with self._cursor() as cur:
            return self._transaction(cur, body)

    def put_metrics(self, run_id: str, iteration: int, rows: Iterable[dict[str, Any]]) -> int:
        """Rows with ``split``, ``domain``, ``name``, ``value``."""
        return self.write("metrics", [{**r, "run_id": run_id, "iteration": iteration} for r in rows])

    def put_checkpoint(self, run_id: str, iteration: int, role: str, path: str | Path, kind: str) -> None:
        self.write(
            "checkpoints",
            [{"run_id": run_id, "iteration": iteration, "role": role, "path": str(path), "kind": kind}],
        )

    def checkpoint(self, run_id: str, iteration: int, role: str) -> dict[str, Any] | None:
        df = self.frame("checkpoints", run_id, iteration, role=role)
        return records(df)[0] if len(df) else None


def status_summary(db: str | Path) -> dict[str, Any]:
    """Open ``db`` read-only and summarise it (``python -m engine status --json``).

    Opening succeeded, so no other process holds the file (DuckDB admits one): a stage still marked ``running``
    was interrupted -- its process was killed -- and is reported as ``interrupted`` (``engine run --run ID``
    resumes it)."""
    with Store(db, read_only=True) as store:
        summary = store.status_summary()
    for run in summary["runs"].values():
        for it in run["iterations"]:
            for state in it["stages"].values():
                if state.get("status") == "running":
                    state["status"] = "interrupted"
    return summary
