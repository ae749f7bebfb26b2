"""Materialised effective pairs behind the studio's pairs page (``Store.pairs_page``).

Contract:

* ``PairView`` keeps, per ``(run_id, iteration)``, the effective pairs (``views.effective_pairs_sql``) joined with
  the task's question/domain and both plan texts, as one table in a private in-memory DuckDB database. It is
  derived data: nothing is persisted, so it works the same on a read-only store and is rebuilt after a restart.
* Freshness is checked on every read against a signature taken *before* reading the store: the store's in-process
  write generation of the tables the view reads (tasks, plans, scores, pairs; bumped after each commit) and the
  newest pair-override (or pair-review) id of that iteration. A changed generation rebuilds the iteration's table
  (~0.5 s for 100,000 pairs over 1,000,000 plans here); newer overrides alone re-derive only the tasks they touch,
  so a curator's override (or review) shows on the next page without a rebuild.
* ``page(...)`` answers exactly what ``StudioViews.pairs_page_sql`` answers (same columns, rows, order and
  ``total``; ``bench store`` checks it), from a table of one iteration's pairs instead of the 1M-row plans table.
  Filters travel as parameters; ``order`` picks one of three fixed ORDER BY clauses.

Why: applying overrides and joining plan texts for every page read cost 100-400 ms at the sizes of ``bench store``;
a page read from the materialised table costs a filtered scan of one iteration's pairs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from engine.views import PAIR_ORDER_KEYS, effective_pairs_sql, pair_order_by, pair_text_filter

# Tables whose rows the materialised view is derived from (overrides are tracked by id, see ``_newest_override``).
SOURCES = ("tasks", "plans", "scores", "pairs")
# Lower-cased copies for the text filter (lowering 300,000 texts on every search doubled its cost); hidden from pages.
_SEARCH_COLUMNS = ("lower(question) AS question_lc, lower(chosen_text) AS chosen_lc, "
                   "lower(rejected_text) AS rejected_lc")
_HIDDEN = "EXCLUDE (pos, question_lc, chosen_lc, rejected_lc)"
_TEXT_FILTER = pair_text_filter("question_lc", "chosen_lc", "rejected_lc")
# The orders of ``StudioViews.pairs_page_sql``; ``pos`` is the position in (task_id, step, pair_idx) order.
ORDERS = {order: pair_order_by(order, "pos") for order in PAIR_ORDER_KEYS}

# ``{bound}`` is empty or a $lo/$hi range on the plans' task_id (row-group pruning when patching a few tasks).
_ROWS_SQL = """
SELECT e.*, t.question, t.domain, pc.text AS chosen_text, pr.text AS rejected_text
FROM eff e
LEFT JOIN tasks t ON t.run_id = $run AND t.task_id = e.task_id
LEFT JOIN (SELECT * FROM plans WHERE run_id = $run AND iteration = $it {bound}) pc
    ON pc.task_id = e.task_id AND pc.step = e.step AND pc.k = e.chosen_k
LEFT JOIN (SELECT * FROM plans WHERE run_id = $run AND iteration = $it {bound}) pr
    ON pr.task_id = e.task_id AND pr.step = e.step AND pr.k = e.rejected_k
"""


def _keys(rows: pa.Table) -> list[tuple]:
    """The sorted (task_id, step, pair_idx) keys of some pair rows."""
    return sorted(zip(*(rows.column(c).to_pylist() for c in ("task_id", "step", "pair_idx"))))


@dataclass
class _Built:
    table: str  # the in-memory table holding this iteration's rows
    generation: tuple[int, ...]  # the store's write generation of SOURCES when read
    newest_override: int  # the newest pair-override id applied


class PairView:
    """One store's materialised pairs; ``query`` reads the store (Arrow), ``generation`` reports its writes."""

    text_filter = _TEXT_FILTER  # the pairs page's text condition over this table's columns

    def __init__(self, query: Callable[..., pa.Table], generation: Callable[[tuple[str, ...]], tuple[int, ...]]):
        self._query = query
        self._generation = generation
        self._db = duckdb.connect(":memory:")
        self._db_lock = threading.Lock()  # cursor() touches shared connection state
        self._built: dict[tuple[str, int], _Built] = {}
        self._key_locks: dict[tuple[str, int], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._tables = 0

    def close(self) -> None:
        with self._db_lock:  # not while another thread is in cursor() (see Store.close)
            self._db.close()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._db_lock:
            cur = self._db.cursor()
        try:
            yield cur
        finally:
            cur.close()

    def _new_name(self) -> str:
        with self._locks_lock:  # two iterations may build at once: each gets its own table
            self._tables += 1
            return f"pv_{self._tables}"

    def _lock(self, key: tuple[str, int]) -> threading.Lock:
        with self._locks_lock:
            return self._key_locks.setdefault(key, threading.Lock())

    # -- freshness -------------------------------------------------------------------------------------------

    def _newest_override(self, run_id: str, iteration: int) -> int:
        df = self._query("SELECT coalesce(max(override_id), -1) AS n FROM overrides WHERE run_id = ? AND "
                         "iteration = ? AND target IN ('pair', 'pair_review')", [run_id, iteration])
        return int(df.column("n")[0].as_py())

    def table(self, run_id: str, iteration: int) -> str:
        """The name of an up-to-date in-memory table of this iteration's effective pairs (built or patched now)."""
        key = (run_id, int(iteration))
        with self._lock(key):  # one builder per iteration; other sessions wait for its result
            generation = self._generation(SOURCES)  # before reading: a write after this makes the next read rebuild
            newest = self._newest_override(*key)
            built = self._built.get(key)
            if built is None or built.generation != generation or newest < built.newest_override:
                built = self._rebuild(key, generation, newest)
            elif newest > built.newest_override:
                built = self._patch(key, built, newest)
            return built.table

    # -- building --------------------------------------------------------------------------------------------

    def _rows(self, run_id: str, iteration: int, tasks: list[str] | None = None) -> pa.Table:
        params: dict[str, Any] = {"run": run_id, "it": iteration}
        if tasks is None:
            return self._query(effective_pairs_sql("all") + _ROWS_SQL.format(bound=""), params)
        params.update(tasks=tasks, lo=min(tasks), hi=max(tasks))
        return self._query(effective_pairs_sql("tasks") + _ROWS_SQL.format(bound="AND task_id BETWEEN $lo AND $hi"),
                           params)

    def _rebuild(self, key: tuple[str, int], generation: tuple[int, ...], newest: int) -> _Built:
        rows = self._rows(*key)
        name = self._built[key].table if key in self._built else self._new_name()
        with self._cursor() as cur:
            cur.register("new_rows", rows)
            try:  # pos = position in task order: the default page is a range scan, not a sort of every pair
                cur.execute(f"""CREATE OR REPLACE TABLE {name} AS
                    SELECT *, {_SEARCH_COLUMNS}, row_number() OVER (ORDER BY task_id, step, pair_idx) - 1 AS pos
                    FROM new_rows ORDER BY task_id, step, pair_idx""")
            finally:
                cur.unregister("new_rows")
        built = _Built(name, generation, newest)
        self._built[key] = built
        return built

    def _patch(self, key: tuple[str, int], built: _Built, newest: int) -> _Built:
        """Re-derive only the tasks that overrides newer than the build touched; their pairs keep their ``pos``.

        An override that adds or removes a pair (a 'choose' of a pair the rule did not make, or its 'restore')
        shifts every later position, so that case rebuilds instead.
        """
        touched = self._query("SELECT DISTINCT task_id FROM overrides WHERE run_id = ? AND iteration = ? AND "
                              "target IN ('pair', 'pair_review') AND override_id > ?",
                              [key[0], key[1], built.newest_override])
        tasks = sorted(str(t) for t in touched.column("task_id").to_pylist())
        rows = self._rows(*key, tasks=tasks)
        with self._cursor() as cur:
            old = cur.sql(f"SELECT task_id, step, pair_idx, pos FROM {built.table} "
                          "WHERE list_contains($tasks, task_id)", params={"tasks": tasks}).to_arrow_table()
            if _keys(old) != _keys(rows):
                return self._rebuild(key, built.generation, newest)
            cur.register("new_rows", rows)
            cur.register("old_pos", old)
            try:
                self._in_transaction(cur, [
                    (f"DELETE FROM {built.table} WHERE list_contains($tasks, task_id)", {"tasks": tasks}),
                    (f"INSERT INTO {built.table} BY NAME SELECT n.*, {_SEARCH_COLUMNS}, o.pos FROM new_rows n "
                     "JOIN old_pos o USING (task_id, step, pair_idx)", None),
                ])
            finally:
                cur.unregister("new_rows")
                cur.unregister("old_pos")
        built.newest_override = newest
        return built

    @staticmethod
    def _in_transaction(cur: duckdb.DuckDBPyConnection, statements: list[tuple[str, Any]]) -> None:
        cur.execute("BEGIN TRANSACTION")
        try:
            for sql, params in statements:
                cur.execute(sql, params) if params is not None else cur.execute(sql)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    # -- reading ---------------------------------------------------------------------------------------------

    def stats(self, run_id: str, iteration: int) -> pd.DataFrame:
        """Every effective pair's margin, flags and plan lengths (characters), in task order: the pairs tab's
        charts, without re-deriving the pairs or touching the plans table."""
        table = self.table(run_id, iteration)
        with self._cursor() as cur:
            return cur.execute(f"""SELECT margin, excluded, tie, length(chosen_text) AS chosen_len,
                length(rejected_text) AS rejected_len FROM {table} ORDER BY pos""").df()

    def page(self, run_id: str, iteration: int, conds: list[str], params: dict[str, Any], order: str,
             limit: int, offset: int) -> pd.DataFrame:
        """A page of the iteration's table: ``conds`` are fixed SQL snippets over its columns with values in
        ``params``, ``order`` a key of ``ORDERS``; a ``total`` column counts every matching row."""
        table = self.table(run_id, iteration)
        params = {**params, "limit": int(limit), "offset": int(offset)}
        if order == "task" and not conds:  # the default page: positions are dense 0..n-1, so read a range
            sql = f"""SELECT * {_HIDDEN}, (SELECT count(*) FROM {table}) AS total FROM {table}
                WHERE pos >= $offset AND pos < $offset + $limit ORDER BY pos"""
        else:  # filter once (MATERIALIZED), then count and page the matches
            sql = f"""WITH hits AS MATERIALIZED (SELECT * FROM {table} WHERE {" AND ".join(conds) or "TRUE"})
                SELECT * {_HIDDEN}, (SELECT count(*) FROM hits) AS total FROM hits
                ORDER BY {ORDERS[order]} LIMIT $limit OFFSET $offset"""
        with self._cursor() as cur:
            return cur.execute(sql, params).df()
