"""``bench store``: bulk ingest (``Store.write`` of a DataFrame) vs row-by-row ``executemany``, and the studio's
page queries on a synthetic store: ``pairs_page`` from the materialised view (``engine.pair_view``) vs the same page
from the base tables (``pairs_page_sql``), checked equal page for page; the view's build time; a page right after
a curator override (patched in); ``task_plans``.

The synthetic store is filled in SQL (``range()``): ``default`` holds 1,000,000 plans (+ their scores) over
66,667 tasks x K=15 and 100,000 pairs; ``tiny`` 20,000 plans and 2,000 pairs. Queries are timed one call at a time
(p50/p95 over ``queries`` calls with varying filters, offsets and tasks).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import pandas as pd

from engine.bench import common

SIZES = {"tiny": {"plans": 20_000, "pairs": 2_000, "ingest_rows": 2_000, "row_by_row": 200, "queries": 10},
         "default": {"plans": 1_000_000, "pairs": 100_000, "ingest_rows": 50_000, "row_by_row": 2_000,
                     "queries": 20}}
K = 15
RUN, IT = "bench", 1


def _plan_rows(n: int, run_id: str) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "iteration": IT, "task_id": [f"t{i // K:06d}" for i in range(n)],
                         "step": 0, "k": [i % K for i in range(n)], "prompt": "p" * 200,
                         "text": [f"Subgoal 1: step {i}" for i in range(n)], "subgoals_json": '["a", "b"]',
                         "well_formed": True})


def _fill(store, plans: int, pairs: int) -> None:
    tasks = plans // K
    with store._cursor() as cur:  # synthetic bulk fill in SQL: the benchmark measures reads, not this
        cur.execute(f"""INSERT INTO tasks SELECT '{RUN}', printf('t%06d', i), CASE WHEN i % 2 = 0 THEN 'maths'
            ELSE 'qa' END, 'synthetic', 'train', 'Question number ' || i || ' about apples', '{{}}', '[]', '[]',
            '42', '{{}}' FROM range({tasks}) r(i)""")
        cur.execute(f"""INSERT INTO plans (run_id, iteration, task_id, step, k, prompt, text, subgoals_json,
            well_formed) SELECT '{RUN}', {IT}, printf('t%06d', i // {K}), 0, i % {K}, 'prompt', 'Subgoal 1: plan '
            || i, '["a"]', TRUE FROM range({tasks * K}) r(i)""")
        cur.execute(f"""INSERT INTO scores SELECT '{RUN}', {IT}, printf('t%06d', i // {K}), 0, i % {K},
            (hash(i) % 1000) / 100.0, exp((hash(i) % 1000) / 100.0), 20 FROM range({tasks * K}) r(i)""")
        per_task = max(1, -(-pairs // tasks))
        cur.execute(f"""INSERT INTO pairs SELECT '{RUN}', {IT}, printf('t%06d', i // {per_task}), 0,
            i % {per_task}, 0, {K - 1}, 0.5, 2.5, 2.0, 'best_worst' FROM range({pairs}) r(i)""")
        cur.execute(f"""INSERT INTO overrides (run_id, iteration, target, task_id, step, action, curator)
            SELECT '{RUN}', {IT}, 'pair', printf('t%06d', i * 7), 0, 'swap', 'bench' FROM range(100) r(i)""")


def _same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    try:
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)
        return True
    except AssertionError:
        return False


def run(size: str, repeats: int, device: str) -> dict:
    from engine.store import Store

    sizes = SIZES[size]
    with tempfile.TemporaryDirectory(prefix="moat-bench-store-") as tmp:
        ingest: dict[str, list[float]] = {"store_write_dataframe": [], "executemany_row_by_row": []}
        n = sizes["ingest_rows"]
        with Store(Path(tmp) / "ingest.duckdb") as store:
            for r in range(repeats):
                frame = _plan_rows(n, f"bulk{r}")
                started = time.perf_counter()
                store.write("plans", frame)
                ingest["store_write_dataframe"].append(time.perf_counter() - started)
                rows = list(_plan_rows(sizes["row_by_row"], f"rows{r}").itertuples(index=False, name=None))
                cols = ", ".join(_plan_rows(1, "x").columns)
                started = time.perf_counter()
                with store._cursor() as cur:  # the naive way: one autocommitted INSERT per row
                    cur.executemany(f"INSERT OR REPLACE INTO plans ({cols}) VALUES ({', '.join('?' * 9)})", rows)
                ingest["executemany_row_by_row"].append(time.perf_counter() - started)
            count = store.count("plans", "bulk0", IT)
        counts = {"store_write_dataframe": n, "executemany_row_by_row": sizes["row_by_row"]}
        ingest_report = {name: {"rows": counts[name], "median_s": round(sorted(t)[len(t) // 2], 4),
                                "rows_per_s": round(counts[name] / sorted(t)[len(t) // 2])}
                         for name, t in ingest.items()}

        with Store(Path(tmp) / "pages.duckdb") as store:
            started = time.perf_counter()
            _fill(store, sizes["plans"], sizes["pairs"])
            fill_s = time.perf_counter() - started
            tasks = sizes["plans"] // K
            started = time.perf_counter()
            store.pair_view.table(RUN, IT)  # the first read after a stage wrote its pairs materialises them
            build_s = time.perf_counter() - started
            pages = {
                "pairs_page": lambda rng: {"limit": 50, "offset": rng.randrange(0, sizes["pairs"] - 50)},
                "pairs_page_by_margin": lambda rng: {"order": "-margin", "limit": 50,
                                                     "offset": rng.randrange(0, 1000)},
                "pairs_page_text_filter": lambda rng: {"text": f"plan {rng.randrange(tasks)}", "limit": 50},
                "pairs_page_overridden": lambda rng: {"overridden": True, "min_margin": -10.0, "limit": 50},
            }
            queries, same = {}, True
            for name, args in pages.items():
                for variant, call in (("materialised", store.pairs_page), ("base_tables", store.pairs_page_sql)):
                    rng = random.Random(0)  # both variants read the same pages
                    frames = [call(RUN, IT, **args(random.Random(1)))]  # warm-up
                    times = []
                    for _ in range(sizes["queries"]):
                        kwargs = args(rng)
                        started = time.perf_counter()
                        frames.append(call(RUN, IT, **kwargs))
                        times.append(time.perf_counter() - started)
                    queries.setdefault(name, {})[variant] = {
                        "p50_ms": round(1000 * common.percentile(times, 0.5), 1),
                        "p95_ms": round(1000 * common.percentile(times, 0.95), 1), "rows": len(frames[-1])}
                    if variant == "materialised":
                        fast_frames = frames
                    else:
                        same &= all(_same(a, b) for a, b in zip(fast_frames, frames))
                q = queries[name]
                q["speedup"] = round(q["base_tables"]["p50_ms"] / max(q["materialised"]["p50_ms"], 1e-3), 1)
            # A curator's override, then the next page (which re-derives the touched task only).
            from engine import curation

            rng, times = random.Random(2), []
            for _ in range(sizes["queries"]):
                task = f"t{rng.randrange(sizes['pairs'] // max(1, -(-sizes['pairs'] // tasks))):06d}"  # has pairs
                curation.exclude_pair(store, RUN, IT, task, 0, curator="bench")
                started = time.perf_counter()
                store.pairs_page(RUN, IT, limit=50)
                times.append(time.perf_counter() - started)
            queries["pairs_page_after_override"] = {"p50_ms": round(1000 * common.percentile(times, 0.5), 1),
                                                    "p95_ms": round(1000 * common.percentile(times, 0.95), 1)}
            rng, times = random.Random(3), []
            for _ in range(sizes["queries"]):
                started = time.perf_counter()
                frame = store.task_plans(RUN, IT, f"t{rng.randrange(tasks):06d}")
                times.append(time.perf_counter() - started)
            queries["task_plans"] = {"p50_ms": round(1000 * common.percentile(times, 0.5), 1),
                                     "p95_ms": round(1000 * common.percentile(times, 0.95), 1), "rows": len(frame)}
            plans_rows = store.count("plans", RUN, IT)
            pairs_rows = store.count("pairs", RUN, IT)
    return {
        "sizes": {"plans": plans_rows, "pairs": pairs_rows, "ingest_rows": n, "fill_s": round(fill_s, 2),
                  "pairs_view_build_s": round(build_s, 3)},
        "ingest": ingest_report,
        "queries": queries,
        "ratios": {"ingest_dataframe_vs_executemany": round(
            ingest_report["store_write_dataframe"]["rows_per_s"]
            / max(ingest_report["executemany_row_by_row"]["rows_per_s"], 1), 1)},
        "correct": {"ingested_rows": count, "pages_equal": same,
                    "ok": same and count == n and plans_rows == (sizes["plans"] // K) * K},
    }
