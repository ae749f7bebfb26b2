"""The MOAT loop on tiny models and a tmp DuckDB: every stage, resume after a stop, overrides, ablations."""

from __future__ import annotations

import pytest

from engine import curation, export
from engine.loop import STAGES, create_run, run_loop, run_stage
from engine.stages.pairs import Candidate, build_pairs
from engine.store import Store

pytestmark = pytest.mark.slow  # trains tiny models: `pytest -m "not slow"` leaves these out


def _params(path):
    from transformers import AutoModelForCausalLM

    return {n: p.detach().clone() for n, p in AutoModelForCausalLM.from_pretrained(path).named_parameters()}


def test_one_iteration_runs_every_stage_and_trains(tmp_path, loop_config, tiny_agents_dir):
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        events: list[dict] = []
        assert run_loop(store, run_id, progress=events.append) == "done"
        # every stage announces itself before its first batch (a progress bar opens when the stage starts)
        firsts = {}
        for event in events:
            firsts.setdefault((event["iteration"], event["stage"]), event)
        assert set(firsts) == {(0, "evaluate")} | {(1, s) for s in STAGES}
        assert all(e["done"] == 0 and e["message"].startswith("started: torch threads ") for e in firsts.values())
        states = store.stage_status(run_id, 1)
        assert {s: states[s]["status"] for s in STAGES} == {s: "done" for s in STAGES}
        assert store.stage_status(run_id, 0)["evaluate"]["status"] == "done"
        for table in ("plans", "scores", "groundings", "verdicts", "eval_traces"):
            assert store.count(table, run_id, 1) > 0, table
        assert store.count("plans", run_id, 1) == 4 * 3
        logs = store.frame("train_logs", run_id, 1)
        dpo_logs = logs[logs.stage == "train_planner"]
        # pairs.min_gap = 0 over 4 sampled plans per task: DPO must have had pairs to train on (never skipped)
        assert store.count("pairs", run_id, 1) > 0, "no pairs: the DPO checks below would not test anything"
        assert any("rewards/margins" in text for text in dpo_logs.logs_json)
        before = _params(tiny_agents_dir / "planner")
        after = _params(store.checkpoint(run_id, 1, "planner")["path"])
        assert all(not (before[n] == after[n]).all() for n in before if "norm" not in n)
        assert logs[logs.stage == "train_grounder"].loss.notna().any()
        before = _params(tiny_agents_dir / "grounder")
        after = _params(store.checkpoint(run_id, 1, "grounder")["path"])
        assert all(not (before[n] == after[n]).all() for n in before if "norm" not in n)
        metrics = store.frame("metrics", run_id, 1)
        assert {"held_in", "held_out"} <= set(metrics.split)
        assert "gap_logppl" in set(metrics.name)


def test_stopped_stage_resumes_without_duplicates(tmp_path, loop_config):
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        calls = {"n": 0}

        def stop_after_first_batch():
            calls["n"] += 1
            return calls["n"] > 1

        assert run_stage(store, run_id, 1, "sample", should_stop=stop_after_first_batch) == "stopped"
        assert store.stage_status(run_id, 1)["sample"]["status"] == "stopped"
        partial = store.count("plans", run_id, 1)
        assert 0 < partial < 12
        assert run_stage(store, run_id, 1, "sample") == "done"
        plans = store.frame("plans", run_id, 1)
        assert len(plans) == 12 and not plans.duplicated(["task_id", "step", "k"]).any()


def test_overrides_change_export_and_survive_pair_rebuild(tmp_path, loop_config):
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score", "pairs"):
            run_stage(store, run_id, 1, stage)
        pairs = store.frame("pairs", run_id, 1)
        assert len(pairs), "min_gap 0 over 3 samples should give pairs"
        first = pairs.iloc[0]
        before = export.pair_rows(store, run_id, 1)
        curation.swap_pair(store, run_id, 1, first.task_id, int(first.step), curator="ada", reason="test")
        swapped = export.pair_rows(store, run_id, 1)
        row = next(r for r in swapped if r["task_id"] == first.task_id)
        old = next(r for r in before if r["task_id"] == first.task_id)
        assert (row["chosen"], row["rejected"]) == (old["rejected"], old["chosen"])
        run_stage(store, run_id, 1, "pairs")  # rebuild the auto pairs
        assert export.pair_rows(store, run_id, 1) == swapped


def test_pairs_max_tasks_caps_dpo_data_but_stage2_grounds_every_task(tmp_path, loop_config):
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score", "pairs"):
            assert run_stage(store, run_id, 1, stage) == "done"
        assert len(set(store.frame("pairs", run_id, 1).task_id)) > 2, "uncapped, more than 2 tasks must pair"
        loop_config.pairs.max_tasks = 2
        for stage in ("pairs", "ground"):
            assert run_stage(store, run_id, 1, stage, config=loop_config) == "done"
        sampled = set(store.frame("plans", run_id, 1).task_id)
        paired = set(store.frame("pairs", run_id, 1).task_id)
        assert len(sampled) == 4 and paired and paired <= sampled and len(paired) <= 2
        assert set(store.frame("groundings", run_id, 1).task_id) == sampled  # stage 2 still sees all four
        run_stage(store, run_id, 1, "pairs", config=loop_config)  # a rebuild keeps the same subset
        assert set(store.frame("pairs", run_id, 1).task_id) == paired


def test_ablation_without_stage1_keeps_the_planner(tmp_path, loop_config, tiny_agents_dir):
    loop_config.stages.stage1 = False
    loop_config.stages.stage2 = False
    loop_config.stages.evaluate_initial = False
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_loop(store, run_id) == "done"
        states = store.stage_status(run_id, 1)
        assert states["train_planner"]["status"] == "skipped" and states["ground"]["status"] == "skipped"
        assert store.checkpoint(run_id, 1, "planner")["path"] == str(tiny_agents_dir / "planner")


def test_pair_rules_ties_and_duplicates():
    c = [Candidate(0, "a", 1.0), Candidate(1, "b", 2.0), Candidate(2, "c", 1.5), Candidate(3, "a", 0.5)]
    (pair,) = build_pairs(c, "best_worst", 0.1)
    assert (pair.chosen.k, pair.rejected.k) == (0, 1)  # "a" twice: the lowest k stands for it
    assert build_pairs([Candidate(0, "a", 1.0), Candidate(1, "b", 1.0)], "best_worst", 0.0) == []  # a tie
    assert build_pairs([Candidate(0, "a", 1.0), Candidate(1, "a", 3.0)], "best_worst", 0.0) == []  # same text
    assert build_pairs(c, "best_worst", 1.5) == []  # gap 1.0 < 1.5
    assert len(build_pairs(c, "all_above_gap", 0.1)) == 3
    assert {(p.chosen.k, p.rejected.k) for p in build_pairs(c, "top_bottom_k", 0.0, top_k=1)} == {(0, 1)}


def test_iterative_formulation_samples_and_scores_per_step(tmp_path, loop_config, demo_tasks):
    loop_config.sample.formulation = "iterative"
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score", "pairs", "ground", "critique"):
            assert run_stage(store, run_id, 1, stage) == "done", stage
        plans = store.frame("plans", run_id, 1)
        assert set(plans.step) >= {1, 2} and 0 not in set(plans.step)
        assert len(store.frame("scores", run_id, 1)) == len(plans)
        verdicts = store.frame("verdicts", run_id, 1)
        assert set(verdicts.status) <= {"accepted", "corrected"} and verdicts.reference_guided.all()


def test_score_calibrate_times_both_kernels_and_scores_the_same(tmp_path, loop_config):
    """``score.calibrate``: the first chunk is scored by both kernels, the faster scores the rest, the counts say
    which and why; the scores equal the configured kernel's to ~1e-6."""
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_stage(store, run_id, 1, "sample") == "done"
        assert run_stage(store, run_id, 1, "score") == "done"
        plain = store.frame("scores", run_id, 1).set_index(["task_id", "step", "k"])["logppl"]
        assert store.stage_status(run_id, 1)["score"]["counts"]["kernel"] == "shared prefix"
        loop_config.score.calibrate = True
        store.delete("scores", run_id, 1)
        assert run_stage(store, run_id, 1, "score", config=loop_config) == "done"
        kernel = store.stage_status(run_id, 1)["score"]["counts"]["kernel"]
        assert kernel.split(" (")[0] in ("shared prefix", "padded batches") and "calibrated on" in kernel
        calibrated = store.frame("scores", run_id, 1).set_index(["task_id", "step", "k"])["logppl"]
        assert (calibrated - plain.loc[calibrated.index]).abs().max() < 1e-5


def test_sample_calibrate_times_both_kernels_and_samples_the_same_plans(tmp_path, loop_config):
    """``sample.calibrate``: the first batch is sampled by both hf kernels with the same seed, the faster samples the
    rest, the counts say which and the two times; the plans equal the configured kernel's."""
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        assert run_stage(store, run_id, 1, "sample") == "done"
        plain = store.frame("plans", run_id, 1).set_index(["task_id", "step", "k"])["text"]
        assert store.stage_status(run_id, 1)["sample"]["counts"]["kernel"] == "shared prefill"
        loop_config.sample.calibrate = True
        store.delete("plans", run_id, 1)
        assert run_stage(store, run_id, 1, "sample", config=loop_config) == "done"
        kernel = store.stage_status(run_id, 1)["sample"]["counts"]["kernel"]
        assert kernel.split(" (")[0] in ("shared prefill", "one batched call") and "calibrated on" in kernel
        assert "same texts" in kernel
        calibrated = store.frame("plans", run_id, 1).set_index(["task_id", "step", "k"])["text"]
        assert calibrated.sort_index().equals(plain.sort_index())


@pytest.mark.parametrize("stage, table", [("score", "scores"), ("sample", "plans")])
def test_a_calibrated_kernel_is_kept_per_model_and_machine(tmp_path, loop_config, monkeypatch, stage, table):
    """The first calibrated stage run times both kernels and keeps the choice in <workdir>/kernel_choices.json; the
    next run reuses it without timing; ``recalibrate`` times again; an unreadable file is measured afresh."""
    import importlib
    import json
    from pathlib import Path

    from engine.threads import ensure_thread_policy

    # The choice is kept per torch thread count; a busy machine would lower it between two stage runs.
    monkeypatch.setattr("engine.loop.adapt_to_load", ensure_thread_policy)
    module = importlib.import_module(f"engine.stages.{stage}")
    getattr(loop_config, stage).calibrate = True
    choices = Path(loop_config.run.workdir) / "kernel_choices.json"
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        if stage == "score":
            assert run_stage(store, run_id, 1, "sample") == "done"

        def again() -> str:
            store.delete(table, run_id, 1)
            assert run_stage(store, run_id, 1, stage, config=loop_config) == "done"
            return store.stage_status(run_id, 1)[stage]["counts"]["kernel"]

        assert "calibrated on" in again()
        kept = json.loads(choices.read_text())
        [(key, record)] = kept.items()
        assert key.startswith(f"{stage}|") and "threads" in key and isinstance(record["fast"], bool)
        real = module._calibrate
        monkeypatch.setattr(module, "_calibrate", lambda *a, **kw: pytest.fail("timed again instead of reusing"))
        assert "calibrated before on this model and machine" in again()
        monkeypatch.setattr(module, "_calibrate", real)
        getattr(loop_config, stage).recalibrate = True
        assert "calibrated on" in again()
        getattr(loop_config, stage).recalibrate = False
        choices.write_text("{not json")
        assert "calibrated on" in again()
        assert key in json.loads(choices.read_text())
