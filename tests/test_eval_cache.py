"""Reused evaluations (engine.eval_cache): a stored result equals a recomputation, and the key follows its inputs."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from engine import eval_cache
from engine.eval_cache import EvaluationCache, StoredEvaluation, evaluation_key
from engine.loop import create_run, run_stage
from engine.runtime import pick_eval_tasks
from engine.store import Store
from engine.tasks import load_tasks
from engine.threads import ensure_thread_policy
from studio.stage_text import stage_summary


@pytest.fixture
def steady_threads(monkeypatch):
    """Stages keep this process's torch threads: the key holds the thread count (a CPU matmul's reduction order
    follows it), and a busy machine would otherwise lower it between two stage runs (engine.threads)."""
    monkeypatch.setattr("engine.loop.adapt_to_load", ensure_thread_policy)


def _evaluate_iteration0(store: Store, config) -> tuple[str, dict]:
    run_id = create_run(store, config)
    assert run_stage(store, run_id, 0, "evaluate") == "done"
    return run_id, store.stage_status(run_id, 0)["evaluate"]["counts"]


def _rows(store: Store, table: str, run_id: str) -> list[dict]:
    frame = store.frame(table, run_id, 0).drop(columns=["run_id"])
    return frame.to_dict("records")


def test_a_reused_evaluation_equals_a_recomputed_one(tmp_path, loop_config, monkeypatch, steady_threads):
    first, second, recomputed = (copy.deepcopy(loop_config) for _ in range(3))
    second.run.seed = first.run.seed + 1  # another seed, the same starting agents and evaluation tasks
    recomputed.run.seed = first.run.seed + 2
    recomputed.evaluate.reuse = False
    with Store(tmp_path / "s.duckdb") as store:
        run_a, counts_a = _evaluate_iteration0(store, first)
        assert "reused_from" not in counts_a and len(counts_a["evaluation_key"]) == 16
        assert list((Path(first.run.workdir) / eval_cache.DIRECTORY).glob("*.json.gz")), "the evaluation was not kept"

        def must_not_run(*args, **kwargs):
            raise AssertionError("a stored evaluation of the same agents was computed again")

        with monkeypatch.context() as patch:
            patch.setattr("engine.stages.evaluation.evaluate", must_not_run)
            run_b, counts_b = _evaluate_iteration0(store, second)
        assert counts_b["reused_from"] == f"{run_a} iteration 0"
        assert counts_b["evaluation_key"] == counts_a["evaluation_key"]
        line = stage_summary(store, run_b, 0, "evaluate", "done", counts_b)
        assert f"reused from run {run_a} iteration 0" in line and "tasks evaluated" in line, line

        run_c, counts_c = _evaluate_iteration0(store, recomputed)
        assert counts_c == {"rows": counts_a["rows"], "metrics": counts_a["metrics"],
                            "not_reusable": "evaluate.reuse = false"}
        for table in ("metrics", "eval_traces"):
            rows_a = _rows(store, table, run_a)
            assert rows_a, table
            assert _rows(store, table, run_b) == rows_a, f"{table}: the reused rows differ from the stored ones"
            # The recomputation is the proof: the same agents on the same tasks give these rows bit for bit.
            assert _rows(store, table, run_c) == rows_a, f"{table}: a recomputation differs from the reused rows"


def test_the_key_follows_what_the_result_depends_on(tmp_path, loop_config, tiny_agents_dir):
    config = loop_config
    tasks = pick_eval_tasks(load_tasks(config.data.tasks), config.evaluate.splits, config.data.eval_limit,
                            config.data.eval_seed)
    planner, grounder = config.planner.path, config.grounder.path

    def key(cfg=config, tasks=tasks, planner=planner, grounder=grounder, gold_plans=False):
        return evaluation_key(cfg, None if gold_plans else planner, grounder, tasks, gold_plans=gold_plans)

    base, why = key()
    assert base and why is None
    assert key() == (base, None), "the key is not stable"

    def changed(**sections) -> object:
        other = copy.deepcopy(config)
        for dotted, value in sections.items():
            section, name = dotted.split("__")
            setattr(getattr(other, section), name, value)
        return other

    # What does not change an evaluation's result does not change the key.
    assert key(changed(run__seed=99, sample__k=7, sft__learning_rate=1.0))[0] == base
    # What does, does.
    assert key(changed(evaluate__batch_size=config.evaluate.batch_size + 1))[0] != base
    assert key(changed(evaluate__plan_max_new_tokens=3))[0] != base
    assert key(changed(planner__dtype="bfloat16"))[0] != base
    assert key(tasks=tasks[:-1])[0] != base
    edited = [dataclasses.replace(tasks[0], answer=str(tasks[0].answer) + "0"), *tasks[1:]]
    assert key(tasks=edited)[0] != base
    assert key(planner=grounder, grounder=planner)[0] != base
    copied = tmp_path / "planner"
    shutil.copytree(planner, copied)
    assert key(planner=str(copied))[0] == base, "the same files elsewhere are the same agent"
    weights = copied / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert key(planner=str(copied))[0] != base, "a changed weight file kept the key"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key()[0] != base, "another thread count may round differently"
    finally:
        torch.set_num_threads(threads)

    # The grounder alone on gold plans (the swap table's G cells) is its own measurement, whatever the planner.
    gold, why = key(gold_plans=True)
    assert gold and why is None and gold != base
    assert key(changed(planner__dtype="bfloat16"), gold_plans=True)[0] == gold
    assert key(grounder=planner, gold_plans=True)[0] != gold
    with pytest.raises(ValueError):  # a missing planner path is a bug, never silently a gold-plans key
        evaluation_key(config, None, grounder, tasks)
    # A name the hub resolves is no fixed set of weights: never reused.
    hub, why = key(planner="some-org/some-model")
    assert hub is None and "'some-org/some-model' is not a local" in why

    remote, why = key(changed(tools__qa_model="gpt-x", tools__qa_base_url="http://127.0.0.1:9"))
    assert remote is None and "qa_model" in why
    shared, why = key(changed(agents__topology="shared"))
    assert shared is None and "shared" in why


def test_a_damaged_or_foreign_entry_is_evaluated_again_and_rewritten(tmp_path, loop_config, steady_threads):
    cache = EvaluationCache(tmp_path / "cache")
    stored = StoredEvaluation(metrics=[{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}],
                              traces=[{"task_id": "t1", "gold_logppl": None}], run_id="r1", iteration=0)
    key = "ab" * 32
    cache.put(key, stored)
    got = cache.get(key)
    assert (got.metrics, got.traces, got.run_id, got.iteration) == (stored.metrics, stored.traces, "r1", 0)
    assert not list(cache.directory.glob("*.tmp")), "a temporary file was left behind"
    assert cache.get("cd" * 32) is None

    path = cache.directory / f"{key}.json.gz"
    path.write_bytes(path.read_bytes()[:20])  # cut short, as a full disk would leave it
    assert cache.get(key) is None
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(json.dumps({"format": 0, "key": key}))  # an older layout
    assert cache.get(key) is None

    # In a run: the damaged entry is evaluated again and replaced by a readable one.
    with Store(tmp_path / "s.duckdb") as store:
        run_id, counts = _evaluate_iteration0(store, loop_config)
        entry = Path(loop_config.run.workdir) / eval_cache.DIRECTORY
        (full_key,) = [p.name.removesuffix(".json.gz") for p in entry.glob("*.json.gz")]
        assert full_key.startswith(counts["evaluation_key"])
        (entry / f"{full_key}.json.gz").write_bytes(b"not gzip")
        second = copy.deepcopy(loop_config)
        second.run.seed += 1
        run_b, counts_b = _evaluate_iteration0(store, second)
        assert "reused_from" not in counts_b
        assert EvaluationCache(entry).get(full_key).run_id == run_b
        assert _rows(store, "metrics", run_b) == _rows(store, "metrics", run_id)


def test_a_workdir_that_cannot_keep_the_entry_still_gets_its_rows(tmp_path, loop_config):
    blocked = Path(loop_config.run.workdir) / eval_cache.DIRECTORY
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("a file where the cache directory would go")  # refused even to root, unlike a chmod
    with Store(tmp_path / "s.duckdb") as store:
        run_id, counts = _evaluate_iteration0(store, loop_config)
        assert counts["not_kept"].startswith(str(blocked)), counts
        assert store.count("eval_traces", run_id, 0) == counts["rows"] > 0
