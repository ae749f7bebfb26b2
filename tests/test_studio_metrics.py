"""The Metrics tab's handlers on a hand-made experiment store (``tests/_experiment_world.py``, no models): the
experiment view's figures (a mean line and a 95% band per variant, from ``engine.report``, checked against a hand
computation), its table, the run view's integer axes, Wilson error bars and colours, the stored swap table and its
CLI hint, and the iteration-to-iteration McNemar table against a hand count."""

from __future__ import annotations

import math
import statistics

import pytest

from engine.report import experiment_report
from engine.store import Store
from tests._experiment_world import (
    EXP,
    GAP,
    HELD_IN,
    HELD_OUT,
    SEEDS,
    SWAP_CORRECT,
    SWAP_N,
    SWAP_RUN,
    SWAP_TESTS,
    VARIANTS,
    build_experiment,
    run_of,
)

T975_DF1 = 12.706204736174707  # Student t quantile 0.975 with 1 degree of freedom (two seeds)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "exp.duckdb") as s:
        build_experiment(s)
        yield s


def _hand(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t interval of two values, by hand."""
    mean = statistics.fmean(values)
    half = T975_DF1 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def _bands_and_lines(fig):
    bands = [t for t in fig.data if t.fill == "toself"]
    lines = [t for t in fig.data if t.fill != "toself"]
    return bands, lines


@pytest.mark.parametrize("key, table", [("held_in_accuracy", HELD_IN), ("held_out_accuracy", HELD_OUT),
                                        ("held_out_gap_ppl", GAP)])
def test_experiment_figures_have_a_mean_line_and_a_band_per_variant(store, key, table):
    from studio.metrics_experiment import experiment_figures

    report = experiment_report(store, EXP)
    fig = experiment_figures(report)[key]
    bands, lines = _bands_and_lines(fig)
    assert [t.name for t in lines] == list(VARIANTS)
    assert [t.name for t in bands] == [f"{v} 95% CI" for v in VARIANTS]
    for variant, band, mean_line in zip(VARIANTS, bands, lines):
        cells = [report["variants"][variant]["iterations"][str(t)][key] for t in range(3)]
        assert list(mean_line.x) == [0, 1, 2]
        assert list(mean_line.y) == [c["mean"] for c in cells]
        lows, highs = [c["ci95"][0] for c in cells], [c["ci95"][1] for c in cells]
        assert list(band.x) == [0, 1, 2, 2, 1, 0] and list(band.y) == highs + lows[::-1]
        for t in range(3):  # ... and the report's numbers are the hand computation
            mean, lo, hi = _hand([table[variant, s][t] for s in SEEDS])
            assert mean_line.y[t] == pytest.approx(mean) and (lows[t], highs[t]) == (pytest.approx(lo),
                                                                                    pytest.approx(hi))
        assert band.fillcolor.startswith("rgba(") and band.line.color == mean_line.line.color
    assert fig.layout.xaxis.tickmode == "linear" and fig.layout.xaxis.dtick == 1


def test_experiment_figures_colour_each_variant_once_and_split_held_out_domains(store):
    from studio.metrics_experiment import experiment_figures

    figs = experiment_figures(experiment_report(store, EXP))
    assert set(figs) == {"held_in_accuracy", "held_out_accuracy", "held_out_gap_ppl", "held_out_by_domain"}
    colour = {}
    for fig in figs.values():
        for trace in _bands_and_lines(fig)[1]:
            assert colour.setdefault(trace.name, trace.line.color) == trace.line.color, trace.name
    assert len(set(colour.values())) == len(VARIANTS)
    by_domain = figs["held_out_by_domain"]
    assert [a.text for a in by_domain.layout.annotations] == ["held-out maths", "held-out qa"]
    bands, lines = _bands_and_lines(by_domain)
    assert len(bands) == len(lines) == 2 * len(VARIANTS)
    maths = [t for t in lines if t.xaxis == "x" and t.name == "full"][0]
    assert list(maths.y) == pytest.approx([statistics.fmean(HELD_OUT["full", s][t] + 0.1 for s in SEEDS)
                                           for t in range(3)])
    assert by_domain.layout.xaxis.dtick == by_domain.layout.xaxis2.dtick == 1


def test_dev_figures_only_when_dev_was_evaluated(store):
    from studio.metrics_experiment import experiment_figures, experiment_table

    assert not {"dev_accuracy", "dev_gap_ppl"} & set(experiment_figures(experiment_report(store, EXP)))
    store.put_metrics(run_of("full", 11), 1, [{"split": "dev", "domain": "all", "name": "accuracy", "value": 0.4},
                                              {"split": "dev", "domain": "all", "name": "gap_ppl", "value": 1.5}])
    figs = experiment_figures(experiment_report(store, EXP))
    assert [(t.name, list(t.y)) for t in _bands_and_lines(figs["dev_accuracy"])[1]] == [("full", [0.4])]
    # the dev gap too: the split a change to the method is judged on before held-out is run
    assert [(t.name, list(t.y)) for t in _bands_and_lines(figs["dev_gap_ppl"])[1]] == [("full", [1.5])]
    assert "dev gap PPL" in experiment_table(experiment_report(store, EXP))


def test_experiment_table_shows_intervals_seeds_and_the_paired_test_vs_baseline(store):
    from studio.metrics_experiment import experiment_table

    text = experiment_table(experiment_report(store, EXP))
    mean, lo, hi = _hand([HELD_IN["full", s][1] for s in SEEDS])
    cell = f"{100 * mean:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] (2 seeds)"
    assert cell == "59.0 [46.3, 71.7] (2 seeds)"
    assert f"| full | 1 | {cell} |" in text
    diffs = [HELD_IN["no_stage1", s][2] - HELD_IN["full", s][2] for s in SEEDS]
    t_stat = statistics.fmean(diffs) / (statistics.stdev(diffs) / math.sqrt(2))
    p = 1 - 2 / math.pi * math.atan(abs(t_stat))  # two-sided Student t with 1 degree of freedom
    row = [line for line in text.splitlines() if line.startswith("| no_stage1 | 2 |")][0]
    mean, lo, hi = _hand([HELD_IN["no_stage1", s][2] for s in SEEDS])
    interval = f"{100 * mean:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] (2 seeds)"
    assert row.startswith(f"| no_stage1 | 2 | {interval}<br>Δ vs full: {100 * statistics.fmean(diffs):+.1f} "
                          f"(p={p:.3g}, n=2) |"), row
    assert "Δ vs full: -13.5 (p=0.0236, n=2)" in row and row.count("Δ vs full") == 4
    # the gap as mean log-PPL beside mean PPL (the issue asks for both), with its own paired test
    mean, lo, hi = _hand([math.log(GAP["no_stage1", s][2]) for s in SEEDS])
    log_diffs = [math.log(GAP["no_stage1", s][2]) - math.log(GAP["full", s][2]) for s in SEEDS]
    assert row.endswith(f"| {mean:.3f} [{max(lo, 0.0):.3f}, {hi:.3f}] (2 seeds)<br>Δ vs full: "
                        f"{statistics.fmean(log_diffs):+.3f} (p=0.0805, n=2) |"), row
    assert "| held-out gap PPL | held-out gap log-PPL |" in text
    assert "Δ" not in [r for r in text.splitlines() if r.startswith("| full |")][0]
    assert "4 runs, 4 done" in text and "Missing" not in text
    # 4 runs x 3 evaluate stages of 10 s, every one from noon: 10 s of clock time, 2 min of stage time
    assert "Wall time: 10 s with any run under way (runs side by side counted once), 2 min 0 s of stage time" in text


def test_experiment_choices_are_newest_first(store):
    from studio.metrics_experiment import experiment_choices

    store.write("experiments", [{"experiment_id": "k-00000001", "name": "k", "source": "k.toml",
                                 "config_json": {}, "created_at": "2099-01-01 00:00:00"}])
    assert [v for _, v in experiment_choices(store)] == ["k-00000001", EXP]
    assert experiment_choices(store)[1][0] == f"abl · {EXP} (4 runs)"


def test_run_view_has_integer_axes_wilson_bars_and_one_colour_per_split_domain(store):
    from engine.stats import wilson
    from studio.tab_metrics import FIGURES, figures

    figs = figures(store, SWAP_RUN)
    assert set(figs) == set(FIGURES)
    for name in ("accuracy", "gap_ppl", "gap_logppl", "pairs", "critic"):
        assert figs[name].layout.xaxis.dtick == 1 and figs[name].layout.xaxis.tickmode == "linear", name
    accuracy = {t.name: t for t in figs["accuracy"].data}
    assert set(accuracy) == {"held_in/all", "held_out/all", "held_out/maths", "held_out/qa"}
    maths = accuracy["held_out/maths"]
    correct = [round((HELD_OUT["full", 11][t] + 0.1) * 100) for t in range(3)]
    assert list(maths.y) == pytest.approx([c / 100 for c in correct])
    bounds = [wilson(c, 100) for c in correct]
    assert list(maths.error_y.array) == pytest.approx([hi - c / 100 for c, (_, hi) in zip(correct, bounds)])
    assert list(maths.error_y.arrayminus) == pytest.approx([c / 100 - lo for c, (lo, _) in zip(correct, bounds)])
    gap = {t.name: t for t in figs["gap_ppl"].data}
    assert list(gap["held_out/all"].y) == pytest.approx(GAP["full", 11])
    log_gap = {t.name: t for t in figs["gap_logppl"].data}
    assert list(log_gap["held_out/all"].y) == pytest.approx([math.log(g) for g in GAP["full", 11]])
    colours = {t.name: t.line.color for t in figs["accuracy"].data}
    assert len(set(colours.values())) == 4
    for name in ("gap_ppl", "gap_logppl"):
        assert {t.name: t.line.color for t in figs[name].data} == {n: colours[n] for n in ("held_in/all",
                                                                                            "held_out/all")}
    both = figures(store, SWAP_RUN, run_of("no_stage1", 11))  # run B: dashed, same colours
    b = {t.name: t for t in both["accuracy"].data}
    assert b["B held_out/qa"].line.dash == "dash" and b["B held_out/qa"].line.color == b["A held_out/qa"].line.color


def test_stored_swaps_read_back_the_cells_and_tests(store):
    from engine.swap import stored_swaps

    table = stored_swaps(store, SWAP_RUN)
    assert (table["base"], table["after"], table["iterations"]) == (0, 2, [0, 2])
    assert list(table["cells"]) == ["P0G0", "P2G0", "P0G2", "P2G2"] and list(table["gold_plans"]) == ["G0", "G2"]
    assert table["cells"]["P2G2"]["held_out"]["maths"]["correct"] == 7
    assert table["tests"]["both"]["results"]["held_out"]["all"] == {"gained": 6, "lost": 0, "p": 0.03125}
    assert [t["label"] for t in table["tests"].values()] == ["stage 1 alone", "stage 2 alone", "both stages",
                                                              "grounder on gold plans"]
    assert stored_swaps(store, run_of("full", 12)) is None


def test_swap_table_renders_counts_and_mcnemar_rows(store):
    from studio.metrics_swaps import swap_markdown

    text = swap_markdown(store, SWAP_RUN)
    assert "| agents | held-out maths | held-out qa | held-out all |" in text
    for (a, b), (maths, qa) in SWAP_CORRECT.items():
        cell = f"G{b}" if a == -1 else f"P{a}G{b}"
        row = [line for line in text.splitlines() if line.startswith(f"| {cell} (")][0]
        cells = [f"{c}/{n} ({100 * c / n:.1f}%)" for c, n in ((maths, SWAP_N), (qa, SWAP_N), (maths + qa, 2 * SWAP_N))]
        assert row.endswith(" | ".join(cells) + " |"), row
    assert "| P2G0 (stage 1 only: planner trained) | 5/10 (50.0%) | 2/10 (20.0%) | 7/20 (35.0%) |" in text
    for label, cell in (("stage 1 alone", (2, 0)), ("stage 2 alone", (0, 2)), ("both stages", (2, 2)),
                        ("grounder on gold plans", (-1, 2))):
        row = [line for line in text.splitlines() if line.startswith(f"| {label}:")][0]
        tests = SWAP_TESTS[cell]
        assert row.endswith(" | ".join(f"+{g} / −{lo} / p={p:.3g}" for g, lo, p in
                                       (tests["maths"], tests["qa"], tests["all"])) + " |"), row


def test_a_run_without_swaps_shows_the_cli_command(store):
    from studio.metrics_swaps import swap_markdown

    run_id = run_of("no_stage1", 12)
    text = swap_markdown(store, run_id)
    assert f"`python -m engine swap --db {store.path} --run {run_id}`" in text and "|" not in text


def test_iteration_changes_equal_a_hand_count(store):
    from engine.changes import iteration_changes
    from studio.metrics_swaps import changes_markdown

    rows = [(r["split"], r["before"], r["after"], r["gained"], r["lost"], r["p"], r["n"])
            for r in iteration_changes(store, SWAP_RUN)]
    # hand count from tests/_experiment_world.TRACES; p = exact two-sided binomial on the discordant tasks
    assert rows == [("held_in", 0, 1, 3, 0, 0.25, 6), ("held_out", 0, 1, 1, 1, 1.0, 4),
                    ("held_in", 1, 2, 1, 2, 1.0, 6), ("held_out", 1, 2, 2, 0, 0.5, 3)]
    text = changes_markdown(store, SWAP_RUN)
    assert "| held-in | 0 → 1 | 3 | 0 | 0.25 | 6 |" in text and "| held-out | 1 → 2 | 2 | 0 | 0.5 | 3 |" in text
    assert iteration_changes(store, run_of("full", 12)) == []
    assert "needs two evaluated iterations" in changes_markdown(store, run_of("full", 12))


def test_experiment_swaps_cover_every_baseline_run(store):
    from studio.metrics_experiment import experiment_swaps

    text = experiment_swaps(store, experiment_report(store, EXP))
    assert "#### full seed 11" in text and "#### full seed 12" in text and "no_stage1" not in text
    assert "**Swap table** of `abl/full/s11`" in text and "--run abl/full/s12" in text


def test_the_per_template_view_lists_the_evaluated_splits_and_counts_by_hand(store):
    from studio.metrics_experiment import breakdown_choices, experiment_breakdown

    assert breakdown_choices(store, EXP) == [("held-out", "held_out"), ("held-in", "held_in")]
    text = experiment_breakdown(store, EXP, "held_out")
    # hand count from tests/_experiment_world.TRACES (only the full seed-11 run has traces): o1, o2 (tpl-a) 1 of 2
    # correct at iteration 0 and 2 of 2 at 2; o3, o4 (tpl-b) 1 of 2, then o3 alone (o4 has no trace at 2)
    assert "*full* (iteration 0 -> 2)" in text and "*no_stage1*" not in text  # no_stage1's runs have no traces
    assert "| tpl-a | maths | 2 | 50.0 -> 100.0 | 0 -> 0 | 0 -> 0 | — -> — |" in text
    assert "| tpl-b | maths | 2 | 50.0 -> 100.0 | 0 -> 0 | 0 -> 0 | — -> — |" in text
    assert f"--db {store.path} --experiment {EXP} --by-template --split held_out --markdown" in text
    assert "No evaluation traces on dev" in experiment_breakdown(store, EXP, "dev")
    assert "needs an evaluation" in experiment_breakdown(store, EXP, None)


def test_a_dev_only_experiment_shows_only_dev(tmp_path):
    """A tuning experiment evaluated on dev alone gets dev figures and columns, no empty held-in/held-out ones."""
    from studio.metrics_experiment import experiment_figures, experiment_table

    with Store(tmp_path / "dev.duckdb") as s:
        s.write("experiments", [{"experiment_id": "tune-1", "name": "tune", "source": "tune.toml",
                                 "config_json": {"variants": {"full": []}, "seeds": [1], "iterations": 1}}])
        run_id = s.create_run("tune/full/s1", {}, tmp_path)
        s.write("experiment_runs", [{"experiment_id": "tune-1", "variant": "full", "seed": 1, "run_id": run_id}])
        assert set(experiment_figures(experiment_report(s, "tune-1"))) == {
            "held_in_accuracy", "held_out_accuracy", "held_out_gap_ppl"}  # nothing measured yet: what will come
        for t, (acc, gap) in enumerate([(0.25, 1.6), (0.40, 1.3)]):
            s.put_metrics(run_id, t, [{"split": "dev", "domain": "all", "name": "accuracy", "value": acc},
                                      {"split": "dev", "domain": "all", "name": "gap_ppl", "value": gap}])
        report = experiment_report(s, "tune-1")
        assert set(experiment_figures(report)) == {"dev_accuracy", "dev_gap_ppl"}
        head = [line for line in experiment_table(report).splitlines() if line.startswith("| variant")][0]
        assert head == "| variant | iteration | dev accuracy % | dev gap PPL |"


def test_empty_charts_say_what_writes_them(store):
    from studio.metrics_notes import EMPTY_BY_STAGE
    from studio.tab_metrics import FIGURES, figures

    def note(fig) -> str:
        return " ".join(a.text for a in fig.layout.annotations  # the note, not the "it N" marks; long notes wrap
                    if a.name != "iteration start").replace("<br>", " ")

    assert set(EMPTY_BY_STAGE) == set(FIGURES)
    nothing = figures(store, None)
    assert all("pick a run" in note(fig) for fig in nothing.values())
    # A picked run with no stage done yet (a first visit's run while it starts): never "pick a run" beside it.
    store.write("runs", [{"run_id": "just-started", "name": "x", "config_json": "{}", "run_dir": "runs/x"}])
    fresh = figures(store, "just-started")
    assert note(fresh["accuracy"]) == "Nothing in this run yet: the evaluate stage writes accuracy"
    assert "DPO stage" in note(fresh["dpo_loss"]) and "pick a run" not in note(fresh["sft_loss"])
    assert not note(figures(store, SWAP_RUN)["accuracy"])  # a chart with data has no note
    # A variant without a critic never writes verdicts: its chart says why, not "yet"; one iteration with a critic
    # among skipped ones keeps the usual note.
    reason = "no critic (stages.grounder_data = raw): SFT on the grounder's own groundings, unchecked"
    for it in (1, 2):
        store.set_stage("just-started", it, "critique", "skipped", counts={"note": reason})
    skipped = figures(store, "just-started")["critic"]
    assert note(skipped) == f"No verdicts in this run. Its critique stage was skipped: {reason}"
    assert all(len(line) <= 60 for line in skipped.layout.annotations[0].text.split("<br>"))  # wrapped to fit
    import plotly.graph_objects as go

    from studio.plots import note_if_empty

    given = "No training logged yet:<br>the loss appears here<br>while a training stage runs"  # broken by its caller
    assert note_if_empty(go.Figure(), given).layout.annotations[0].text == given
    assert "held-<br>" not in note_if_empty(go.Figure(), "x " * 27 + "held-out").layout.annotations[0].text
    # another run overlaid that has not reached its critique: it may still write verdicts
    store.write("runs", [{"run_id": "other", "name": "y", "config_json": "{}", "run_dir": "runs/y"}])
    assert "Nothing in this run yet" in note(figures(store, "just-started", "other")["critic"])
    # a variant without stage 1: its pairs and planner-training charts say so too
    for stage, why in (("pairs", "stage 1 disabled (stages.stage1 = false)"), ("train_planner", "stage 1 disabled")):
        store.set_stage("just-started", 1, stage, "skipped", counts={"note": why})
    stage1 = figures(store, "just-started")
    assert note(stage1["pairs"]) == ("No pairs in this run. Its pairs stage was skipped: stage 1 disabled "
                                     "(stages.stage1 = false)")
    assert note(stage1["dpo_loss"]) == note(stage1["dpo_rewards"]) == (
        "No planner training in this run. Its train_planner stage was skipped: stage 1 disabled")
    assert "Nothing in this run yet" in note(stage1["sft_loss"])  # the grounder's stage was not skipped
    store.set_stage("just-started", 3, "critique", "running")
    running = figures(store, "just-started")["critic"]
    assert note(running) == "Nothing in this run yet: the critique stage writes verdicts"


def test_swap_rows_say_which_agent_trained_and_which_grounder_reads_gold_plans(store):
    """The swap table's rows in the CLI report's words: "G0 (on gold plans)" and "G2 (on gold plans)" did not say
    which grounder is the starting one, nor "stage 1 only" which agent trained."""
    from studio.metrics_swaps import swap_markdown

    rows = {line.split(" | ")[0].removeprefix("| ") for line in swap_markdown(store, SWAP_RUN).splitlines()
            if line.startswith("| P") or line.startswith("| G")}
    assert rows == {"P0G0 (starting agents)", "P2G0 (stage 1 only: planner trained)",
                    "P0G2 (stage 2 only: grounder trained)", "P2G2 (both: the trained system)",
                    "G0 (starting grounder on gold plans)", "G2 (trained grounder on gold plans)"}


def _one_seed(store) -> dict:
    """The experiment's report with seed 12's runs taken out of it: every cell one seed."""
    for variant in VARIANTS:
        store.delete("experiment_runs", run_of(variant, 12))
    return experiment_report(store, EXP)


def test_one_seed_figures_draw_no_band_and_say_there_is_no_interval(store):
    """One seed has no interval: no zero-width band under the line, and no title promising a 95% interval."""
    from studio.metrics_experiment import experiment_figures

    figs = experiment_figures(_one_seed(store))
    for name, fig in figs.items():
        bands, lines = _bands_and_lines(fig)
        assert not bands and lines, name
        title, subtitle = fig.layout.title.text, fig.layout.title.subtitle.text  # what is drawn: in the subtitle
        assert subtitle == "1 seed: no interval" and "95%" not in title + subtitle, name


def test_two_seed_figures_keep_their_band_and_title(store):
    from studio.metrics_experiment import experiment_figures

    for fig in experiment_figures(experiment_report(store, EXP)).values():
        assert fig.layout.title.subtitle.text == "mean over seeds, 95% interval"


def test_experiment_hover_reads_as_the_table_cell(store):
    """Hovering a mean point shows the table's cell (mean, interval, seeds), not plotly's bare "(1, 60%)", which
    rounded 60.4% to 60% beside the table's 60.4."""
    from studio.metrics_experiment import experiment_figures

    report = experiment_report(store, EXP)
    figs = experiment_figures(report)
    full = [t for t in _bands_and_lines(figs["held_in_accuracy"])[1] if t.name == "full"][0]
    assert "%{customdata}" in full.hovertemplate and "%{fullData.name}" in full.hovertemplate
    mean, lo, hi = _hand([HELD_IN["full", s][1] for s in SEEDS])
    assert full.customdata[1] == f"accuracy %: {100 * mean:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] (2 seeds)"
    gap = [t for t in _bands_and_lines(figs["held_out_gap_ppl"])[1] if t.name == "no_stage1"][0]
    cell = report["variants"]["no_stage1"]["iterations"]["2"]["held_out_gap_ppl"]
    assert gap.customdata[2] == (f"gap PPL: {cell['mean']:.3f} [{cell['ci95'][0]:.3f}, {cell['ci95'][1]:.3f}] "
                                 "(2 seeds)")
    one = experiment_figures(_one_seed(store))["held_out_by_domain"]
    maths = [t for t in _bands_and_lines(one)[1] if t.name == "full" and t.xaxis == "x"][0]
    assert maths.customdata[0] == f"accuracy %: {100 * (HELD_OUT['full', 11][0] + 0.1):.1f} (1 seed, no interval)"


def test_percent_axes_hover_with_one_decimal_and_name_their_quantity(store):
    """Percent axes: whole % on the ticks, one decimal on hover (the run view's accuracy hover said "49%" for
    49.3%); the per-domain figure names its y axis; the critic's shares are % as the other rates are."""
    from studio.metrics_experiment import experiment_figures
    from studio.tab_metrics import figures

    run = figures(store, SWAP_RUN)
    for name, axis in (("accuracy", "yaxis"), ("pairs", "yaxis2"), ("critic", "yaxis")):
        layout = run[name].layout[axis]
        assert (layout.tickformat, layout.hoverformat) == (".0%", ".1%"), name
    exp = experiment_figures(experiment_report(store, EXP))
    for name in ("held_in_accuracy", "held_out_accuracy"):
        assert exp[name].layout.yaxis.hoverformat == ".1%"
    by_domain = exp["held_out_by_domain"].layout
    assert by_domain.yaxis.title.text == "accuracy"
    assert by_domain.yaxis.hoverformat == by_domain.yaxis2.hoverformat == ".1%"


def test_experiment_table_shows_the_change_vs_iteration_0_as_the_cli_does(store):
    """The CLI report's "Change vs iteration 0" (accuracy Δ pp, the gap PPL's Δ % overall and per domain) in the
    studio too: the gap's % change is the paper's number, and the studio showed no change vs iteration 0 at all."""
    from engine.report_markdown import report_markdown
    from studio.metrics_experiment import experiment_changes

    report = experiment_report(store, EXP)
    text = experiment_changes(report)
    assert "**Change vs iteration 0**" in text
    head = [line for line in text.splitlines() if line.startswith("| variant | iteration | held-in accuracy Δ")][0]
    assert head == ("| variant | iteration | held-in accuracy Δ pp | held-out accuracy Δ pp | held-out gap PPL Δ % |")
    pct = [100 * (GAP["full", s][2] - GAP["full", s][0]) / GAP["full", s][0] for s in SEEDS]  # by hand
    row = [line for line in text.split("**Change vs iteration 0**")[1].splitlines()
           if line.startswith("| full | 2 |")][0]
    assert f"{statistics.fmean(pct):+.1f} (p=" in row.split(" | ")[4], row
    cli = report_markdown(report)  # the same differences as the CLI's table
    cli_row = [line for line in cli.split("## Change vs iteration 0")[1].splitlines()
               if line.startswith("| full | 2 |")][0]
    assert [c.split(" ")[0] for c in row.split(" | ")[2:]] == [c.split(" ")[0] for c in cli_row.split(" | ")[2:]]
    one = experiment_changes(_one_seed(store))
    assert f"| full | 2 | {100 * (HELD_IN['full', 11][2] - HELD_IN['full', 11][0]):+.1f} (1 seed, no test) |" in one


def test_the_experiment_view_shows_the_change_table(store):
    """The tab's experiment endpoint draws the change vs iteration 0 beside the table (and clears it for the run
    view)."""
    from studio.app import build_app
    from studio.metrics_experiment import experiment_changes

    demo = build_app(store, "examples/demo.toml")
    try:
        show = {f.api_name: f.fn for f in demo.fns.values()}["metrics_experiment"]
        changes = experiment_changes(experiment_report(store, EXP))
        assert changes and changes in show(EXP)
        assert changes not in show("")
    finally:
        demo.close()
