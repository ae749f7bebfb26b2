"""The materialised pairs page (engine.pair_view) answers exactly what the base-table query answers, through
overrides (patched task by task), pairs that appear and disappear, and stage re-runs (rebuilt)."""

from __future__ import annotations

import itertools
import random

import pandas as pd
import pytest

from engine import curation
from engine.store import Store
from engine.tasks import Task
from tests._store_world import IT, RUN, auto_pair_rows, build_world, world_store

FILTERS = [
    {},
    {"min_margin": 0.5},
    {"text": "lovelace"},
    {"overridden": True},
    {"excluded": True},
    {"ties": True},
    {"min_margin": -5.0, "overridden": False, "text": "add"},
]


def same_pages(store: Store, limit: int = 2) -> None:
    """Every filter x order x offset: the materialised page equals the base-table page, row for row."""
    for filters, order, offset in itertools.product(FILTERS, ("task", "margin", "-margin", "length", "shuffled"),
                                                    (0, 2)):
        fast = store.pairs_page(RUN, IT, order=order, limit=limit, offset=offset, **filters)
        slow = store.pairs_page_sql(RUN, IT, order=order, limit=limit, offset=offset, **filters)
        pd.testing.assert_frame_equal(fast.reset_index(drop=True), slow.reset_index(drop=True), check_dtype=False,
                                      obj=f"page {filters} order={order} offset={offset}")


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def count_rebuilds(store: Store, monkeypatch) -> list[int]:
    calls = [0]
    rebuild = store.pair_view._rebuild

    def counted(*args, **kwargs):
        calls[0] += 1
        return rebuild(*args, **kwargs)

    monkeypatch.setattr(store.pair_view, "_rebuild", counted)
    return calls


def test_overrides_are_patched_in_and_pages_stay_equal(store, monkeypatch):
    rebuilds = count_rebuilds(store, monkeypatch)
    same_pages(store)
    assert rebuilds[0] == 1
    curation.swap_pair(store, RUN, IT, "m1", 0, curator="ann")
    curation.exclude_pair(store, RUN, IT, "m2", 0, curator="bob")
    same_pages(store)
    curation.tie_pair(store, RUN, IT, "q1", 0)
    same_pages(store)
    assert rebuilds[0] == 1  # overrides of existing pairs patch their tasks: no rebuild
    page = store.pairs_page(RUN, IT, overridden=True)
    assert page["task_id"].tolist() == ["m1", "m2", "q1"] and page["curator"].tolist()[:2] == ["ann", "bob"]
    curation.restore_pair(store, RUN, IT, "m1", 0)
    same_pages(store)
    assert rebuilds[0] == 1


def test_a_chosen_new_pair_and_its_restore_rebuild(store, monkeypatch):
    rebuilds = count_rebuilds(store, monkeypatch)
    same_pages(store)
    curation.choose_pair(store, RUN, IT, "m1", 0, 1, 3, pair_idx=1, curator="cy")  # a pair the rule did not make
    same_pages(store)
    assert rebuilds[0] == 2 and store.pairs_page(RUN, IT)["total"].iloc[0] == 4
    curation.restore_pair(store, RUN, IT, "m1", 0, pair_idx=1)
    same_pages(store)
    assert store.pairs_page(RUN, IT)["total"].iloc[0] == 3


def test_rewritten_pairs_and_plans_are_seen(store):
    curation.swap_pair(store, RUN, IT, "m1", 0)
    same_pages(store)
    rows = [r for r in auto_pair_rows() if r["task_id"] != "m2"]  # a re-run of the pairs stage drops m2's pair
    store.replace("pairs", RUN, IT, rows)
    assert store.pairs_page(RUN, IT)["task_id"].tolist() == ["m1", "q1"]
    same_pages(store)
    store.write("plans", [{"run_id": RUN, "iteration": IT, "task_id": "q1", "step": 0, "k": 0, "prompt": "p",
                           "text": "Subgoal 1: Look it up.", "subgoals_json": ["Look it up."], "well_formed": True}])
    assert store.pairs_page(RUN, IT, text="look it up")["task_id"].tolist() == ["q1"]
    same_pages(store)


def test_many_random_pairs_and_overrides_agree(tmp_path):
    """200 tasks, random logppls, a random stream of curator actions: equal pages after every batch of actions."""
    rng = random.Random(7)
    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        tasks = [f"t{i:03d}" for i in range(200)]
        store.put_tasks(RUN, [Task(id=t, domain="maths", source="s", split="train", question=f"Question {t}",
                                   answer="1") for t in tasks])
        plans, scores, pairs = [], [], []
        for t in tasks:
            lp = [round(rng.uniform(0, 3), 3) for _ in range(4)]
            for k in range(4):
                plans.append({"run_id": RUN, "iteration": IT, "task_id": t, "step": 0, "k": k, "prompt": "p",
                              "text": f"Subgoal 1: plan {t} {k}", "subgoals_json": ["x"], "well_formed": True})
                scores.append({"run_id": RUN, "iteration": IT, "task_id": t, "step": 0, "k": k, "logppl": lp[k],
                               "ppl": 1.0, "n_tokens": 3})
            best, worst = min(range(4), key=lp.__getitem__), max(range(4), key=lp.__getitem__)
            pairs.append({"run_id": RUN, "iteration": IT, "task_id": t, "step": 0, "pair_idx": 0, "chosen_k": best,
                          "rejected_k": worst, "chosen_logppl": lp[best], "rejected_logppl": lp[worst],
                          "margin": lp[worst] - lp[best], "rule": "best_worst"})
        store.write_batch([("plans", plans), ("scores", scores), ("pairs", pairs)])
        for _ in range(6):
            for _ in range(15):
                t = rng.choice(tasks)
                action = rng.choice(["swap", "exclude", "tie", "restore", "choose"])
                if action == "choose":
                    c, r = rng.sample(range(4), 2)
                    curation.choose_pair(store, RUN, IT, t, 0, c, r, pair_idx=rng.choice([0, 1]))
                else:
                    getattr(curation, f"{action}_pair")(store, RUN, IT, t, 0)
            for filters, order in itertools.product(
                    [{}, {"min_margin": 1.0}, {"overridden": True}, {"text": "t01"}], ("task", "-margin", "length")):
                offset = rng.randrange(0, 190)
                fast = store.pairs_page(RUN, IT, order=order, limit=25, offset=offset, **filters)
                slow = store.pairs_page_sql(RUN, IT, order=order, limit=25, offset=offset, **filters)
                pd.testing.assert_frame_equal(fast, slow, check_dtype=False)


def test_every_insert_path_counts_as_a_write(store, tmp_path):
    """Writes that bypass ``write_batch`` (a run created with its tasks in one transaction) still move the
    generation the view checks, so it can never serve rows older than a commit it could see."""
    before = store.generation(("tasks",))
    store.create_run("again", {}, tmp_path, [Task(id="z1", domain="maths", source="s", split="train",
                                                   question="Q?", answer="1")])
    assert store.generation(("tasks",)) > before


def test_iterations_built_at_once_by_many_threads_stay_apart(store):
    """Sessions reading different iterations at the same moment each get their own materialised table."""
    import threading

    rows = [{**r, "iteration": it} for it in (1, 2, 3) for r in auto_pair_rows()]
    plans = store.frame("plans", RUN, IT)
    store.write_batch([("pairs", rows), ("plans", pd.concat([plans.assign(iteration=it) for it in (1, 2, 3)])),
                       ("scores", pd.concat([store.frame("scores", RUN, IT).assign(iteration=it)
                                             for it in (1, 2, 3)]))])
    curation.swap_pair(store, RUN, 2, "m1", 0)
    errors, pages = [], {}

    def read(it: int) -> None:
        try:
            pages[it] = store.pairs_page(RUN, it, overridden=True)["task_id"].tolist()
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(it,)) for it in (1, 2, 3) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and pages == {1: [], 2: ["m1"], 3: []}


def test_pair_stats_match_the_base_tables(store):
    from engine.views import EFFECTIVE_PAIRS_SQL

    curation.swap_pair(store, RUN, IT, "m1", 0)
    curation.exclude_pair(store, RUN, IT, "q1", 0)
    expected = store.query(EFFECTIVE_PAIRS_SQL + """
        SELECT e.margin, e.excluded, e.tie, length(pc.text) AS chosen_len, length(pr.text) AS rejected_len FROM eff e
        LEFT JOIN plans pc ON pc.run_id = $run AND pc.iteration = $it AND pc.task_id = e.task_id AND pc.step = e.step
            AND pc.k = e.chosen_k
        LEFT JOIN plans pr ON pr.run_id = $run AND pr.iteration = $it AND pr.task_id = e.task_id AND pr.step = e.step
            AND pr.k = e.rejected_k
        ORDER BY e.task_id, e.step, e.pair_idx""", {"run": RUN, "it": IT})
    pd.testing.assert_frame_equal(store.pair_stats(RUN, IT), expected, check_dtype=False)
