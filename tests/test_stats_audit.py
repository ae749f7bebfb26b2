"""Audit of the statistics behind the reports: hand-written stores whose right answers are computed by hand.

* The experiment report's swap section reads every cell over the same seeds, at the largest iteration all seeds'
  tables share (``engine.report``).
* A stored swap table never labels a McNemar test with a base it was not computed against (``engine.swap``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine.report import experiment_report
from engine.report_markdown import report_markdown
from engine.store import Store
from engine.swap import stored_swaps


def _swap_rows(run_id: str, a: int, b: int, correct: int, test: tuple[int, int, float] | None = None,
               n: int = 10) -> list[dict]:
    """One held-out cell (``correct`` of ``n``), with its McNemar row (gained, lost, p) when given."""
    values = [("accuracy", correct / n), ("n", n), ("correct", correct)]
    values += list(zip(("mcnemar_gained", "mcnemar_lost", "mcnemar_p"), test or ()))
    return [{"run_id": run_id, "planner_after": a, "grounder_after": b, "split": "held_out", "domain": "all",
             "name": name, "value": float(value)} for name, value in values]


def _accuracy_rows(run_id: str, cells: dict[tuple[int, int], float]) -> list[dict]:
    """Held-out accuracy rows only, as the experiment report reads them."""
    return [{"run_id": run_id, "planner_after": a, "grounder_after": b, "split": "held_out", "domain": "all",
             "name": "accuracy", "value": acc} for (a, b), acc in cells.items()]


# seed -> (planner_after, grounder_after) -> held-out accuracy. Seed 2's run was extended to iteration 3 and has its
# second table (0 vs 3) beside its first (0 vs 2); seed 1's run has not reached iteration 3 yet.
EXTENDED = {1: {(0, 0): .30, (2, 0): .40, (0, 2): .35, (2, 2): .50, (-1, 0): .60, (-1, 2): .70},
            2: {(0, 0): .20, (2, 0): .30, (0, 2): .25, (2, 2): .40, (-1, 0): .60, (-1, 2): .70,
                (3, 0): .31, (0, 3): .26, (3, 3): .45, (-1, 3): .72}}


def test_experiment_swaps_read_every_cell_over_the_same_seeds(tmp_path: Path):
    """Before: N was the largest iteration any seed's table had (3, seed 2 alone), so P3G3 = 45% (one seed) stood
    beside P0G0 = 25% (both seeds): +20 pp read off the table, while the paired gain said +25, and the heading said
    "2 seed(s)". Now N = 2, which both seeds' tables hold, and every cell and gain is over seeds 1 and 2."""
    with Store(tmp_path / "s.duckdb") as store:
        store.write("experiments", [{"experiment_id": "x-1", "name": "x", "source": "x.toml", "config_json": {
            "variants": {"full": []}, "seeds": [1, 2], "iterations": 3, "swap": ["full"]}}])
        for seed, cells in EXTENDED.items():
            run_id = store.create_run(f"x/full/s{seed}", {}, tmp_path)
            store.write("experiment_runs", [{"experiment_id": "x-1", "variant": "full", "seed": seed,
                                             "run_id": run_id}])
            store.write("swaps", _accuracy_rows(run_id, cells))
        report = experiment_report(store, "x-1")
        sw = report["swaps"]["full"]
        assert (sw["base"], sw["after"], sw["seeds"]) == (0, 2, [1, 2])
        assert set(sw["cells"]) == {"P0G0", "P2G0", "P0G2", "P2G2", "gold/G0", "gold/G2"}
        for cell, key in (("P0G0", (0, 0)), ("P2G2", (2, 2)), ("gold/G2", (-1, 2))):
            stat = sw["cells"][cell]["held_out_accuracy"]
            assert stat["n"] == 2 and stat["mean"] == pytest.approx((EXTENDED[1][key] + EXTENDED[2][key]) / 2)
        both = sw["gains"]["both"]["held_out_accuracy"]
        assert both["seeds"] == [1, 2] and both["diff"] == pytest.approx(0.20)
        assert "Swap table: full (planner x grounder, 2 seed(s)" in report_markdown(report)

        # Once no iteration is shared (seed 1's only table is 0 vs 1), the largest is read over the seeds that have it.
        first = store.query("SELECT run_id FROM experiment_runs WHERE seed = 1")["run_id"].iloc[0]
        store.delete("swaps", first)
        store.write("swaps", _accuracy_rows(first, {(0, 0): .3, (1, 0): .35, (0, 1): .3, (1, 1): .4}))
        sw = experiment_report(store, "x-1")["swaps"]["full"]
        assert (sw["after"], sw["seeds"]) == (3, [2])
        assert sw["cells"]["P0G0"]["held_out_accuracy"]["n"] == 1  # not seed 1's P0G0 beside seed 2's P3G3
        json.dumps(sw, allow_nan=False)


def test_stored_swaps_never_label_a_test_with_the_wrong_base(tmp_path: Path):
    """``swap --base 0 --after 2``, then ``swap --base 1 --after 2``: the second table replaces P2G2's and G2's McNemar
    rows with tests against P1G1 and G1, but the stored table (base 0, the smallest) labelled them "P2G2 vs P0G0":
    +1 -0 p=1 for a cell that has 8 of 10 right against P0G0's 2 of 10."""
    with Store(tmp_path / "s.duckdb") as store:
        run_id = store.create_run("r", {}, tmp_path)

        def table(base: int, cells: dict[tuple[int, int], tuple[int, tuple | None]]) -> None:
            # as engine.swap.swap_table writes a table: its cells' rows replaced in one transaction
            store.write_batch([("swaps", [r for (a, b), (c, test) in cells.items() for r in _swap_rows(run_id, a, b,
                                                                                                       c, test)])],
                              deletes=[("swaps", {"run_id": run_id, "planner_after": a, "grounder_after": b})
                                       for a, b in cells])

        table(0, {(0, 0): (2, None), (2, 0): (4, (2, 0, .5)), (-1, 0): (5, None), (2, 2): (8, (6, 0, .03125)),
                  (0, 2): (3, (1, 0, 1.0)), (-1, 2): (9, (4, 0, .125))})
        first = stored_swaps(store, run_id)
        assert first is not None and set(first["tests"]) == {"stage1", "stage2", "both", "gold_plans"}
        assert first["tests"]["both"]["results"]["held_out"]["all"] == {"gained": 6, "lost": 0, "p": .03125}
        time.sleep(0.01)  # another transaction, another time
        table(1, {(1, 1): (7, None), (2, 1): (7, (0, 0, 1.0)), (-1, 1): (9, None), (2, 2): (8, (1, 0, 1.0)),
                  (1, 2): (8, (1, 0, 1.0)), (-1, 2): (9, (0, 0, 1.0))})
        at_0 = stored_swaps(store, run_id)
        assert at_0 is not None and (at_0["base"], at_0["after"]) == (0, 2)
        assert set(at_0["tests"]) == {"stage1", "stage2"}  # P2G2's and G2's tests are now against iteration 1
        assert at_0["tests"]["stage1"]["results"]["held_out"]["all"]["gained"] == 2
        assert at_0["cells"]["P2G2"]["held_out"]["all"]["correct"] == 8  # the cells themselves are kept
        at_1 = stored_swaps(store, run_id, base=1)
        assert at_1 is not None and set(at_1["tests"]) == {"stage1", "stage2", "both", "gold_plans"}
        assert at_1["tests"]["both"]["before"] == "P1G1"
        assert at_1["tests"]["both"]["results"]["held_out"]["all"] == {"gained": 1, "lost": 0, "p": 1.0}


def test_a_variant_evaluated_on_other_tasks_is_not_paired_with_the_baseline(tmp_path: Path):
    """A variant with ``data.domains = ["maths"]`` scored maths only; its held-out accuracy (0.60, 0.62) was paired
    with the baseline's over maths and QA (0.40, 0.41): "+20.5 pp" with a p-value, a difference of task sets read
    as an effect. ``report --against`` refused such pairs; the experiment's own report now does too, and says why.
    A variant that differs in a training field only (``dpo.beta``) is still paired."""
    accuracy = {"full": (0.40, 0.41), "maths_only": (0.60, 0.62), "beta": (0.45, 0.47)}
    configs = {"full": {"data": {"domains": []}, "dpo": {"beta": 0.2}},
               "maths_only": {"data": {"domains": ["maths"]}, "dpo": {"beta": 0.2}},
               "beta": {"data": {"domains": []}, "dpo": {"beta": 0.5}}}
    with Store(tmp_path / "s.duckdb") as store:
        store.write("experiments", [{"experiment_id": "d-1", "name": "d", "source": "d.toml", "config_json": {
            "variants": {v: [] for v in accuracy}, "seeds": [1, 2], "iterations": 1, "baseline": "full"}}])
        for variant, values in accuracy.items():
            for seed, value in zip((1, 2), values):
                run_id = store.create_run(f"d/{variant}/s{seed}", {**configs[variant], "run": {"seed": seed}},
                                          tmp_path)
                store.write("experiment_runs", [{"experiment_id": "d-1", "variant": variant, "seed": seed,
                                                 "run_id": run_id}])
                store.put_metrics(run_id, 1, [{"split": "held_out", "domain": "all", "name": "accuracy",
                                               "value": value}])
        report = experiment_report(store, "d-1")
    maths_only = report["variants"]["maths_only"]
    assert "vs_baseline" not in maths_only["iterations"]["1"]
    assert maths_only["vs_baseline_refused"] == ("evaluates other tasks than full: data.domains = ['maths'] here, "
                                                 "[] there")
    beta = report["variants"]["beta"]
    assert "vs_baseline_refused" not in beta
    assert beta["iterations"]["1"]["vs_baseline"]["held_out_accuracy"]["diff"] == pytest.approx(0.055)
    text = report_markdown(report)
    assert "Not paired: maths_only evaluates other tasks than full: data.domains" in text
    assert "| maths_only | 1 |" not in text.split("## vs full")[1].split("## Runs")[0]


def test_an_infinite_value_gives_no_interval_instead_of_crashing_the_report():
    """``statistics.stdev`` raises on inf or NaN (AttributeError on Python 3.11): one seed's infinite gap log-PPL (a
    gold token given probability 0) crashed ``report``. Now the summary has no interval (null in the JSON) and a
    paired test over it gives no p."""
    import math

    from engine.report import clean, summary
    from engine.report_markdown import format_interval, format_test
    from engine.stats import mean_interval, paired_t

    for values in ([math.inf, 1.0], [math.nan, 1.0, 2.0]):
        out = mean_interval(values)
        assert out["n"] == len(values) and all(math.isnan(x) for x in out["ci95"]) and math.isnan(out["sd"])
    cell = clean(summary({1: math.inf, 2: 0.7}, "held_out_gap_logppl"))
    assert cell["mean"] is None and cell["ci95"] == [None, None]
    json.dumps(cell, allow_nan=False)
    assert format_interval(cell) == "–"
    test = paired_t([0.5, 0.6], [math.nan, 0.7])
    assert test["p"] == 1.0 and format_test(clean(test)) == "–"
    # finite values keep their t interval: two seeds, 1 degree of freedom, half-width t(0.975, 1) * sd / sqrt(2)
    half = 12.706204736174698 * 0.1
    assert mean_interval([0.5, 0.7])["ci95"] == pytest.approx([0.6 - half, 0.6 + half], abs=1e-9)
