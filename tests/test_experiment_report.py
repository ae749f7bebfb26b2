"""An experiment's report (``engine.report``, ``engine.report_markdown``): means, t intervals and paired tests over
seeds against a hand computation on a hand-written store; the markdown tables and the CLI; dev-only tuning reports;
one-variant and one-seed reports."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.report import busy_seconds, experiment_report, summary
from engine.report_markdown import report_markdown
from engine.store import Store

T975_DF2 = 4.302652729911275  # Student t 0.975 quantile, 2 degrees of freedom


def hand_interval(values: list[float]) -> tuple[float, float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T975_DF2 * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def hand_paired_p_df2(diffs: list[float]) -> float:
    """Two-sided p of a paired t test with 3 pairs: for 2 degrees of freedom P(|T| >= t) = 1 - t / sqrt(t^2 + 2)."""
    mean = sum(diffs) / 3
    t = abs(mean) / (statistics.stdev(diffs) / math.sqrt(3))
    return 1 - t / math.sqrt(t * t + 2)


# variant -> seed -> iteration -> (held_in acc, held_out acc, held_out gap_ppl, held_out maths acc)
HAND = {
    "full": {1: {0: (0.50, 0.40, 10.0, 0.30), 1: (0.60, 0.45, 8.0, 0.40)},
             2: {0: (0.52, 0.38, 12.0, 0.35), 1: (0.66, 0.47, 9.0, 0.45)},
             3: {0: (0.48, 0.41, 11.0, 0.20), 1: (0.61, 0.42, 10.0, 0.50)}},
    "no_stage1": {1: {0: (0.50, 0.40, 10.0, 0.30), 1: (0.55, 0.41, 9.5, 0.35)},
                  2: {0: (0.52, 0.38, 12.0, 0.35), 1: (0.56, 0.40, 11.0, 0.30)},
                  3: {0: (0.48, 0.41, 11.0, 0.20), 1: (0.57, 0.43, 10.5, 0.25)}},
    "no_stage2": {1: {0: (0.50, 0.40, 10.0, 0.30)}},  # interrupted after iteration 0; seeds 2, 3 never started
}


def maths_gap(gap: float, t: int) -> float:
    """The hand store's held-out maths gap PPL: the all-domain one, 2 lower after iteration 0."""
    return gap - 2.0 * t


def linked_run(store: Store, experiment_id: str, variant: str, seed: int, workdir: Path) -> str:
    """A run of the hand-written store, listed under ``experiment_id`` as (variant, seed)."""
    name = experiment_id.split("-")[0]
    run_id = store.create_run(f"{name}/{variant}/s{seed}", {"stages": {"evaluate_initial": True}}, workdir)
    store.write("experiment_runs", [{"experiment_id": experiment_id, "variant": variant, "seed": seed,
                                     "run_id": run_id}])
    return run_id


@pytest.fixture
def hand_store(tmp_path):
    start = datetime(2026, 1, 1, 12, 0, 0)
    with Store(tmp_path / "hand.duckdb") as store:
        store.write("experiments", [{"experiment_id": "abl-0000beef", "name": "abl", "source": "abl.toml",
                                     "config_json": {"variants": {"full": [], "no_stage1": ["stages.stage1=false"],
                                                                  "no_stage2": ["stages.stage2=false"]},
                                                     "seeds": [1, 2, 3], "iterations": 1, "baseline": "full"}}])
        for variant, seeds in HAND.items():
            for seed, its in seeds.items():
                run_id = linked_run(store, "abl-0000beef", variant, seed, tmp_path)
                for t, (held_in, held_out, gap, maths) in its.items():
                    store.put_metrics(run_id, t, [
                        {"split": "held_in", "domain": "all", "name": "accuracy", "value": held_in},
                        {"split": "held_out", "domain": "all", "name": "accuracy", "value": held_out},
                        {"split": "held_out", "domain": "all", "name": "gap_ppl", "value": gap},
                        {"split": "held_out", "domain": "all", "name": "gap_logppl", "value": math.log(gap)},
                        {"split": "held_out", "domain": "maths", "name": "accuracy", "value": maths},
                        {"split": "held_out", "domain": "maths", "name": "gap_ppl", "value": maths_gap(gap, t)},
                        {"split": "held_out", "domain": "all", "name": "n", "value": 100.0}])
                    store.write("stages", [{"run_id": run_id, "iteration": t, "stage": "evaluate",
                                            "status": "done", "started_at": start,
                                            "finished_at": start + timedelta(seconds=10 + t)}])
                if variant == "no_stage2":
                    store.write("stages", [{"run_id": run_id, "iteration": 1, "stage": "sample",
                                            "status": "failed", "started_at": start,
                                            "finished_at": start + timedelta(seconds=5)}])
        yield store


def test_report_numbers_equal_a_hand_computation(hand_store):
    report = experiment_report(hand_store, "abl-0000beef")
    full = report["variants"]["full"]["iterations"]
    column = {"held_in_accuracy": 0, "held_out_accuracy": 1, "held_out_gap_ppl": 2}
    for variant in ("full", "no_stage1"):
        for t in (0, 1):
            cell = report["variants"][variant]["iterations"][str(t)]
            assert cell["seeds"] == [1, 2, 3]
            for key, i in column.items():
                mean, lo, hi = hand_interval([HAND[variant][s][t][i] for s in (1, 2, 3)])
                assert cell[key]["mean"] == pytest.approx(mean, abs=1e-12)
                assert cell[key]["ci95"] == pytest.approx([lo, hi], abs=1e-9)
                assert cell[key]["per_seed"] == {str(s): HAND[variant][s][t][i] for s in (1, 2, 3)}
            mean, lo, hi = hand_interval([HAND[variant][s][t][3] for s in (1, 2, 3)])
            maths = cell["by_domain"]["held_out"]["maths"]["accuracy"]
            assert (maths["mean"], maths["ci95"]) == (pytest.approx(mean), pytest.approx([lo, hi]))
    # change vs iteration 0, paired over seeds
    diffs = [HAND["full"][s][1][1] - HAND["full"][s][0][1] for s in (1, 2, 3)]
    change = full["1"]["vs_iteration_0"]["held_out_accuracy"]
    mean, lo, hi = hand_interval(diffs)
    assert change["diff"] == pytest.approx(mean) and change["ci95"] == pytest.approx([lo, hi])
    assert change["p"] == pytest.approx(hand_paired_p_df2(diffs), abs=1e-9) and change["seeds"] == [1, 2, 3]
    pct = [100 * (HAND["full"][s][1][2] - HAND["full"][s][0][2]) / HAND["full"][s][0][2] for s in (1, 2, 3)]
    gap = full["1"]["vs_iteration_0"]["held_out_gap_ppl_pct"]
    mean, lo, hi = hand_interval(pct)
    assert gap["diff"] == pytest.approx(mean) and gap["ci95"] == pytest.approx([lo, hi])
    assert gap["p"] == pytest.approx(hand_paired_p_df2(pct), abs=1e-9)
    # the same change per domain (the paper's figure is the maths grounder's PPL)
    pct = [100 * (maths_gap(HAND["full"][s][1][2], 1) - maths_gap(HAND["full"][s][0][2], 0))
           / maths_gap(HAND["full"][s][0][2], 0) for s in (1, 2, 3)]
    by_domain = full["1"]["vs_iteration_0"]["held_out_gap_ppl_pct_by_domain"]
    mean, lo, hi = hand_interval(pct)
    assert list(by_domain) == ["maths"] and by_domain["maths"]["diff"] == pytest.approx(mean)
    assert by_domain["maths"]["ci95"] == pytest.approx([lo, hi])
    assert "held-out maths gap PPL Δ %" in report_markdown(report)
    # a variant against the baseline at the same iteration
    versus = report["variants"]["no_stage1"]["iterations"]["1"]["vs_baseline"]["held_in_accuracy"]
    diffs = [HAND["no_stage1"][s][1][0] - HAND["full"][s][1][0] for s in (1, 2, 3)]
    mean, lo, hi = hand_interval(diffs)
    assert versus["diff"] == pytest.approx(mean) and versus["ci95"] == pytest.approx([lo, hi])
    assert versus["p"] == pytest.approx(hand_paired_p_df2(diffs), abs=1e-9)
    assert "vs_baseline" not in full["1"]
    # the interrupted variant: one seed at iteration 0, none at 1; its run is incomplete, the others missing
    partial = report["variants"]["no_stage2"]["iterations"]
    assert list(partial) == ["0"] and partial["0"]["seeds"] == [1]
    assert partial["0"]["held_out_accuracy"]["ci95"] == [0.40, 0.40]  # one seed: no made-up width
    assert partial["0"]["vs_baseline"]["held_in_accuracy"]["seeds"] == [1]
    runs = {(r["variant"], r["seed"]): r for r in report["runs"]}
    assert runs[("no_stage2", 1)]["status"] == "incomplete" and runs[("no_stage2", 1)]["iterations_done"] == 0
    assert runs[("no_stage2", 1)]["at"] == "1:sample failed"
    assert runs[("full", 2)]["status"] == "done" and runs[("full", 2)]["wall_s"] == pytest.approx(21.0)
    assert report["missing"] == [{"variant": "no_stage2", "seed": 2}, {"variant": "no_stage2", "seed": 3}]
    assert report["wall_s"]["total"] == pytest.approx(6 * 21.0 + 10 + 5)
    # Every stage of the hand store starts at noon: the clock time with any run busy is the longest one, 11 s.
    assert report["wall_s"]["busy"] == pytest.approx(11.0)
    json.dumps(report, allow_nan=False)  # strict JSON


def test_a_run_stopped_between_two_stages_of_an_iteration_is_not_called_not_started(hand_store):
    """A run stopped after its sample stage (score not yet recorded) read "iteration 1 not started" while ``status``
    showed sample done."""
    run_id = next(r["run_id"] for r in experiment_report(hand_store, "abl-0000beef")["runs"]
                  if (r["variant"], r["seed"]) == ("no_stage2", 1))
    hand_store.set_stage(run_id, 1, "sample", "done")
    runs = {(r["variant"], r["seed"]): r for r in experiment_report(hand_store, "abl-0000beef")["runs"]}
    stopped = runs[("no_stage2", 1)]
    assert stopped["status"] == "incomplete" and stopped["at"] == "iteration 1: sample done"


def test_busy_time_counts_overlaps_once_and_leaves_out_idle_gaps():
    start = datetime(2026, 1, 1, 12, 0, 0)

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    # two runs side by side (0-10 and 5-20), a nested stage (6-7), a pause, then a resumed run (30-40)
    intervals = [(at(30), at(40)), (at(0), at(10)), (at(6), at(7)), (at(5), at(20))]
    assert busy_seconds(intervals) == pytest.approx(20.0 + 10.0)  # 0-20, then 30-40
    assert busy_seconds([(0, 4), (4, 6)]) == 6.0 and busy_seconds([]) == 0.0


def test_report_markdown_and_cli(hand_store, capsys, tmp_path):
    text = report_markdown(experiment_report(hand_store, "abl-0000beef"))
    mean, lo, hi = hand_interval([HAND["full"][s][1][0] * 100 for s in (1, 2, 3)])
    assert f"| full | 1 | 3 | {mean:.1f} [{lo:.1f}, {hi:.1f}] |" in text
    for heading in ("## held_in", "## held_out", "## Change vs iteration 0", "## vs full", "## Runs"):
        assert heading in text
    assert "maths accuracy %" in text and "| no_stage2 | 2 | - | missing |" in text
    # the gap both ways, as the issue asks: mean PPL and mean log-PPL (the loss the PPL scores are made of)
    assert "| variant | iteration | seeds | accuracy % | gap PPL | gap log-PPL | maths accuracy % |" in text
    held_out = text.split("## held_out")[1].split("## ")[0]
    ppl = hand_interval([HAND["full"][s][1][2] for s in (1, 2, 3)])
    log_ppl = hand_interval([math.log(HAND["full"][s][1][2]) for s in (1, 2, 3)])
    row = [r for r in held_out.splitlines() if r.startswith("| full | 1 |")][0]
    assert row.split(" | ")[4:6] == [f"{ppl[0]:.3f} [{ppl[1]:.3f}, {ppl[2]:.3f}]",
                                     f"{log_ppl[0]:.3f} [{log_ppl[1]:.3f}, {log_ppl[2]:.3f}]"], row
    db = hand_store.path
    hand_store.close()
    assert main(["report", "--db", str(db), "--experiment", "abl-0000beef", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["variants"]["full"]["iterations"]["1"]) >= {"held_in_accuracy", "held_out_accuracy",
                                                              "held_out_gap_ppl", "seeds"}
    assert main(["report", "--db", str(db), "--experiment", "abl-0000beef", "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("# Experiment abl (`abl-0000beef`)")
    assert main(["report", "--db", str(db), "--experiment", "abl-nope"]) == 2
    err = capsys.readouterr().err
    assert "no experiment 'abl-nope'" in err and "abl-0000beef (abl, 7 runs)" in err
    assert main(["report", "--db", str(tmp_path / "none.duckdb"), "--experiment", "x"]) == 2


def test_summary_intervals_stay_inside_the_quantitys_range():
    """Few seeds give t intervals past 0 or 100%; the report cuts them to the range, and leaves the mean alone."""
    low = summary({1: 0.0, 2: 0.0, 3: 0.1}, "held_out_accuracy")
    mean, lo, hi = hand_interval([0.0, 0.0, 0.1])
    assert lo < 0 and low["mean"] == pytest.approx(mean) and low["ci95"] == pytest.approx([0.0, hi])
    high = summary({1: 1.0, 2: 0.9, 3: 1.0}, "accuracy")
    assert high["ci95"][1] == 1.0 and high["ci95"][0] == pytest.approx(hand_interval([1.0, 0.9, 1.0])[1])
    assert summary({1: 1.0, 2: 1.0, 3: 1.3}, "held_out_gap_ppl")["ci95"][0] == 1.0
    assert summary({1: 0.0, 2: 0.0, 3: 0.3}, "gold_logppl")["ci95"][0] == 0.0
    free = summary({1: -1.0, 2: 0.0, 3: 2.0}, "n")  # no known range: the t interval as it is
    assert free["ci95"] == pytest.approx(list(hand_interval([-1.0, 0.0, 2.0])[1:]))


def dev_gap(seed: int, t: int) -> float:
    """A dev gap PPL per seed and iteration: falls by 10, 20 and 30% over one iteration."""
    return 2.0 * (1 - 0.1 * seed * t)


def test_a_dev_only_tuning_report_shows_dev_changes_and_no_empty_held_out_columns(tmp_path):
    """Tuning experiments evaluate dev and held-in, never held-out: the change tables must show what they measured."""
    dev = {"best": {1: (0.10, 0.30), 2: (0.10, 0.40), 3: (0.10, 0.35)},  # seed: (iteration 0, iteration 1)
           "top3": {1: (0.10, 0.20), 2: (0.10, 0.50), 3: (0.10, 0.30)}}
    with Store(tmp_path / "tune.duckdb") as store:
        store.write("experiments", [{"experiment_id": "tune-0000cafe", "name": "tune", "source": "tune.toml",
                                     "config_json": {"variants": {"best": [], "top3": ["ground.which=top_n"]},
                                                     "seeds": [1, 2, 3], "iterations": 1, "baseline": "best"}}])
        for variant, seeds in dev.items():
            for seed, values in seeds.items():
                run_id = linked_run(store, "tune-0000cafe", variant, seed, tmp_path)
                for t, value in enumerate(values):
                    store.put_metrics(run_id, t, [
                        {"split": "dev", "domain": "all", "name": "accuracy", "value": value},
                        {"split": "dev", "domain": "all", "name": "gap_ppl", "value": dev_gap(seed, t)},
                        {"split": "dev", "domain": "qa", "name": "gap_ppl", "value": dev_gap(seed, t) + t},
                        {"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}])
        report = experiment_report(store, "tune-0000cafe")
        text = report_markdown(report)
    change = text[text.index("## Change vs iteration 0"):text.index("## vs best")]
    assert ("| variant | iteration | held-in accuracy Δ pp | dev accuracy Δ pp | dev gap PPL Δ % | "
            "dev qa gap PPL Δ % |") in change
    mean, lo, hi = hand_interval([(0.30 - 0.10) * 100, (0.40 - 0.10) * 100, (0.35 - 0.10) * 100])
    assert f"| best | 1 | +0.0 (n=3, the same on every seed: no test) | {mean:+.1f} [{lo:+.1f}, {hi:+.1f}]" in change
    # the gap's change on dev, where a gap target may be tuned: per seed % of PPL, all domains and per domain
    vs_0 = report["variants"]["best"]["iterations"]["1"]["vs_iteration_0"]
    pct = [100 * (dev_gap(s, 1) - dev_gap(s, 0)) / dev_gap(s, 0) for s in (1, 2, 3)]
    mean, lo, hi = hand_interval(pct)
    assert vs_0["dev_gap_ppl_pct"]["diff"] == pytest.approx(mean)
    assert vs_0["dev_gap_ppl_pct"]["ci95"] == pytest.approx([lo, hi])
    pct_qa = [100 * (dev_gap(s, 1) + 1 - dev_gap(s, 0)) / dev_gap(s, 0) for s in (1, 2, 3)]
    assert vs_0["dev_gap_ppl_pct_by_domain"]["qa"]["diff"] == pytest.approx(statistics.fmean(pct_qa))
    assert f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}]" in change and "held_out_gap_ppl_pct" not in vs_0
    versus = text[text.index("## vs best"):]
    mean, lo, hi = hand_interval([(0.20 - 0.30) * 100, (0.50 - 0.40) * 100, (0.30 - 0.35) * 100])
    assert f"| top3 | 1 | +0.0 (n=3, the same on every seed: no test) | {mean:+.1f} [{lo:+.1f}, {hi:+.1f}]" in versus
    assert "held-out" not in change and "held-out" not in versus.split("## Runs")[0]
    assert "| dev accuracy Δ pp | dev gap PPL Δ |" in versus  # dev's gap, paired with the baseline's


def test_a_one_variant_report_has_no_empty_baseline_table(tmp_path):
    """The iterations preset has only its baseline: the vs-baseline section would be an empty table."""
    with Store(tmp_path / "one.duckdb") as store:
        store.write("experiments", [{"experiment_id": "iterations-0000f00d", "name": "iterations",
                                     "source": "iterations.toml",
                                     "config_json": {"variants": {"full": []}, "seeds": [1, 2], "iterations": 1}}])
        for seed in (1, 2):
            run_id = linked_run(store, "iterations-0000f00d", "full", seed, tmp_path)
            for t in (0, 1):
                store.put_metrics(run_id, t, [{"split": "held_out", "domain": "all", "name": "accuracy",
                                               "value": 0.2 + 0.1 * t + 0.01 * seed}])
        report = experiment_report(store, "iterations-0000f00d")
    text = report_markdown(report)
    assert report["baseline"] == "full" and "## vs full" not in text and "(no data)" not in text
    assert "## Change vs iteration 0" in text


def test_one_seed_prints_no_interval_and_no_test():
    """With one seed the JSON keeps its [mean, mean] interval and p = 1 (the interface), but the tables never print
    a zero-width "interval" or a p-value: they say there is none (a reader took [40.9, 40.9] for certainty)."""
    from engine.report_markdown import format_interval, format_test
    from engine.stats import mean_interval, paired_t
    from studio.metrics_experiment import _interval, _test

    one, two = mean_interval([0.409]), mean_interval([0.409, 0.5])
    assert one["ci95"] == [0.409, 0.409]  # the JSON's shape is unchanged
    assert format_interval(one, 100) == "40.9 (n=1)" and _interval(one, 100, 1) == "40.9 (1 seed, no interval)"
    assert format_interval(two, 100).startswith("45.5 [") and _interval(two, 100, 1).endswith("(2 seeds)")
    single = paired_t([0.5], [0.4])
    assert format_test(single, 100) == "-10.0 (n=1, no test)" and _test(single, 100, 1) == "-10.0 (1 seed, no test)"
    assert format_test(paired_t([0.5, 0.6], [0.4, 0.4]), 100).endswith("p=0.205 (n=2)")


def test_seeds_that_all_differ_alike_give_no_test_not_p_zero():
    """Two seeds whose difference happened to be the same (a gap that did not move) gave sd 0 and p = 0.0: a
    zero-width interval read as certainty. No spread, no t test: p = 1 (as for one seed) and the tables say why."""
    from engine.report_markdown import format_test
    from engine.stats import paired_t
    from studio.metrics_experiment import _test

    same = paired_t([0.5, 0.6], [0.45, 0.55])
    assert same["p"] == 1.0 and same["sd"] == 0.0 and same["diff"] == pytest.approx(-0.05)
    assert format_test(same, 100) == "-5.0 (n=2, the same on every seed: no test)"
    assert _test(same, 100, 1) == "-5.0 (the same on all 2 seeds, no test)"
    assert paired_t([0.5, 0.6], [0.4, 0.4])["p"] == pytest.approx(0.205, abs=1e-3)


def test_wilson_bounds_at_none_and_all_correct_are_exactly_0_and_1():
    from engine.stats import wilson

    # Computed, the bound is centre - half with rounding left over; JSON readers saw 5.55e-17 for "0".
    for n in (1, 7, 35, 225):
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0
        low, high = wilson(0, n)
        assert 0.0 < high < 1.0 and wilson(n, n)[0] == pytest.approx(1.0 - high)
    low, high = wilson(13, 50)  # mirrored: 37 of 50 has the bounds 1 - high, 1 - low
    assert wilson(37, 50) == pytest.approx((1 - high, 1 - low)) and 0 < low < 13 / 50 < high < 1
