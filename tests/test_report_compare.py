"""``report --against``: one experiment's variants paired with another experiment's baseline in the same store, the
numbers against a hand computation, the config differences it names, and the pairings it refuses (different
evaluation tasks, an unknown variant, no shared seed)."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from engine.__main__ import main
from engine.report_compare import IncomparableExperiments, compare_markdown, compare_report
from engine.store import Store

T975_DF2 = 4.302652729911275  # t quantile, 2 degrees of freedom


def config(**changes: dict) -> dict:
    """A run config snapshot as the store keeps it (nested by section), with ``changes`` merged per section."""
    base = {"run": {"name": "x", "seed": 0, "iterations": 1, "workdir": "runs"},
            "data": {"tasks": "examples/demo/tasks.jsonl", "eval_limit": 0, "eval_seed": 0},
            "sample": {"k": 15}, "critic": {"error_rate": 0.0}, "evaluate": {"formulation": "onetime"}}
    return {section: {**fields, **changes.get(section, {})} for section, fields in base.items()}


# experiment -> variant -> (config changes, seed -> (iteration 0, iteration 1) held-out accuracy)
STORE = {
    "iterations-0000aaaa": {"full": ({}, {1: (0.40, 0.50), 2: (0.38, 0.47), 3: (0.41, 0.52)})},
    "critic-0000bbbb": {"noisy": ({"critic": {"error_rate": 0.3}}, {1: (0.40, 0.45), 2: (0.38, 0.46),
                                                                    3: (0.41, 0.44), 4: (0.40, 0.41)})},
    "other-0000cccc": {"full": ({"data": {"eval_limit": 100}}, {1: (0.30, 0.35)})},
    "late-0000dddd": {"full": ({}, {7: (0.40, 0.42)})},
}


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "compare.duckdb") as opened:
        for experiment_id, variants in STORE.items():
            name = experiment_id.split("-")[0]
            opened.write("experiments", [{"experiment_id": experiment_id, "name": name, "source": f"{name}.toml",
                                          "config_json": {"variants": {v: [] for v in variants},
                                                          "iterations": 1}}])
            for variant, (changes, seeds) in variants.items():
                for seed, values in seeds.items():
                    snapshot = config(**changes)
                    snapshot["run"].update(name=f"{name}/{variant}/s{seed}", seed=seed)
                    run_id = opened.create_run(f"{name}/{variant}/s{seed}", snapshot, tmp_path)
                    opened.write("experiment_runs", [{"experiment_id": experiment_id, "variant": variant,
                                                      "seed": seed, "run_id": run_id}])
                    for t, value in enumerate(values):
                        opened.put_metrics(run_id, t, [
                            {"split": "held_out", "domain": "all", "name": "accuracy", "value": value}])
        yield opened


def test_pairs_each_variant_with_the_other_experiments_baseline_over_shared_seeds(store):
    report = compare_report(store, "critic-0000bbbb", "iterations-0000aaaa")
    assert report["against"] == {"experiment": "iterations-0000aaaa", "name": "iterations", "variant": "full"}
    noisy = report["variants"]["noisy"]
    assert noisy["differs"] == {"critic.error_rate": [0.3, 0.0]}  # run name, seed etc. are not differences
    test = noisy["iterations"]["1"]["held_out_accuracy"]
    here, there = STORE["critic-0000bbbb"]["noisy"][1], STORE["iterations-0000aaaa"]["full"][1]
    diffs = [here[s][1] - there[s][1] for s in (1, 2, 3)]  # seed 4 ran only here: left out of the pairing
    mean = sum(diffs) / 3
    half = T975_DF2 * statistics.stdev(diffs) / math.sqrt(3)
    t = abs(mean) / (statistics.stdev(diffs) / math.sqrt(3))
    assert test["seeds"] == [1, 2, 3] and test["n"] == 3
    assert test["diff"] == pytest.approx(mean) and test["ci95"] == pytest.approx([mean - half, mean + half])
    assert test["p"] == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-9)  # two-sided p, 2 degrees of freedom
    assert noisy["iterations"]["0"]["held_out_accuracy"]["diff"] == pytest.approx(0.0)  # same starting agents
    text = compare_markdown(report)
    assert f"| noisy | 1 | {mean * 100:+.1f} [{(mean - half) * 100:+.1f}, {(mean + half) * 100:+.1f}]" in text
    assert "| noisy | `critic.error_rate` | `0.3` | `0.0` |" in text
    json.dumps(report, allow_nan=False)


def test_refuses_experiments_that_evaluate_different_tasks(store):
    with pytest.raises(IncomparableExperiments, match=r"data\.eval_limit: 100 here, 0 there"):
        compare_report(store, "other-0000cccc", "iterations-0000aaaa")


def test_refuses_an_unknown_variant_and_no_shared_seed(store):
    with pytest.raises(IncomparableExperiments, match="no variant 'reference'; its variants: full"):
        compare_report(store, "critic-0000bbbb", "iterations-0000aaaa", "reference")
    with pytest.raises(IncomparableExperiments, match="share no seed"):
        compare_report(store, "late-0000dddd", "iterations-0000aaaa")


def test_the_cli_prints_json_markdown_and_exits_2_on_a_bad_pairing(store, capsys):
    db = store.path
    store.close()
    assert main(["report", "--db", str(db), "--experiment", "critic-0000bbbb",
                 "--against", "iterations-0000aaaa:full", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["variants"]["noisy"]["iterations"]["1"]["held_out_accuracy"]["seeds"] == [1, 2, 3]
    assert main(["report", "--db", str(db), "--experiment", "critic-0000bbbb",
                 "--against", "iterations-0000aaaa"]) == 0
    assert capsys.readouterr().out.startswith("# critic (`critic-0000bbbb`) vs iterations")
    assert main(["report", "--db", str(db), "--experiment", "other-0000cccc",
                 "--against", "iterations-0000aaaa"]) == 2
    assert "evaluate different tasks" in capsys.readouterr().err
    assert main(["report", "--db", str(db), "--experiment", "critic-0000bbbb", "--against", "nope-1"]) == 2
    assert "no experiment 'nope-1'" in capsys.readouterr().err


def test_a_dev_tuning_experiment_read_against_its_baseline_shows_the_dev_gap(tmp_path):
    """A tuning file runs on dev only and is judged by the gap: the markdown must carry the dev gap's paired
    difference beside dev accuracy (it once showed only a held-out gap, so a dev-only comparison had none)."""
    gaps = {"base": {1: 1.60, 2: 1.50, 3: 1.55}, "new": {1: 1.50, 2: 1.46, 3: 1.40}}
    with Store(tmp_path / "dev.duckdb") as opened:
        for experiment_id, variant in (("tune-0000eeee", "base"), ("tunelora-0000ffff", "new")):
            name = experiment_id.split("-")[0]
            opened.write("experiments", [{"experiment_id": experiment_id, "name": name, "source": f"{name}.toml",
                                          "config_json": {"variants": {variant: []}, "iterations": 1}}])
            for seed, gap in gaps[variant].items():
                snapshot = config(sample={"k": 4 if variant == "new" else 15})
                snapshot["run"].update(name=f"{name}/{variant}/s{seed}", seed=seed)
                run_id = opened.create_run(f"{name}/{variant}/s{seed}", snapshot, tmp_path)
                opened.write("experiment_runs", [{"experiment_id": experiment_id, "variant": variant,
                                                  "seed": seed, "run_id": run_id}])
                opened.put_metrics(run_id, 1, [
                    {"split": "dev", "domain": "all", "name": "accuracy", "value": 0.2},
                    {"split": "dev", "domain": "all", "name": "gap_ppl", "value": gap}])
        report = compare_report(opened, "tunelora-0000ffff", "tune-0000eeee", "base")
    test = report["variants"]["new"]["iterations"]["1"]["dev_gap_ppl"]
    diffs = [gaps["new"][s] - gaps["base"][s] for s in (1, 2, 3)]
    assert test["diff"] == pytest.approx(sum(diffs) / 3)
    text = compare_markdown(report)
    assert "| variant | iteration | dev accuracy Δ pp | dev gap PPL Δ |" in text
    assert "held-out gap PPL Δ" not in text  # no held-out evaluation, no empty column
    assert f"| new | 1 | +0.0 (n=3, the same on every seed: no test) | {sum(diffs) / 3:+.3f} [" in text
    assert "| new | `sample.k` | `4` | `15` |" in text
