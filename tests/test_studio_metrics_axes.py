"""The Metrics tab's plotly axes and layout, as a browser audit read them on a phone (390 px wide): percent ticks that
stay distinct on a small share (a 1.1% tie rate read "0%, 1%, 1%"), whole-number ticks on the pair count (it read
"91.5"), DPO's reward accuracies (a share) on a percent axis of their own, beside the logit rewards, and titles and
legends that fit a narrow chart (titles cut off at "... lower is better", a legend column taking half the chart).

Layout properties are checked on the figures the handlers return (hand-made stores of ``tests/_store_world.py`` and
``tests/_experiment_world.py``, no models); what plotly.js would print on a tick is reproduced from the axis' format
rules (``_tick_labels``: the first ``tickformatstops`` entry whose ``dtickrange`` holds the tick step, else
``tickformat``, as ``Axes.getTickFormat`` picks it), d3's percent formats being Python's.
"""

from __future__ import annotations

import pytest

from engine.report import experiment_report
from engine.store import Store
from tests._experiment_world import EXP, SWAP_RUN, build_experiment, run_of
from tests._store_world import IT, RUN, world_store

# The 1-2-5 steps plotly's automatic ticks take on a 0-100% axis, from a zoomed-in hundredth of a percent up.
STEPS = [m * 10.0 ** e for e in range(-4, 0) for m in (1, 2, 5)]


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def experiment(tmp_path):
    with Store(tmp_path / "exp.duckdb") as s:
        build_experiment(s)
        yield s


def _format_for(axis, step: float) -> str:
    """The d3 format plotly.js prints ``axis``' ticks with when they are ``step`` apart."""
    for stop in axis.tickformatstops or ():
        low, high = stop.dtickrange
        if (low is None or low <= step) and (high is None or step <= high):
            return stop.value
    return axis.tickformat


def _tick_labels(axis, step: float, ticks: int = 7) -> list[str]:
    spec = _format_for(axis, step)
    assert spec.endswith("%"), spec  # a percent axis
    return [format(k * step, spec) for k in range(ticks)]


def test_percent_ticks_stay_distinct_on_a_small_share(world, experiment):
    """A 1.1% tie rate: plotly steps its ticks by 0.2%; ".0%" printed them "0%, 0%, 0%, 1%, 1%, 1%". Every percent
    axis keeps distinct labels at every step plotly may take, and whole percents once ticks are 1% apart or more."""
    from studio.metrics_experiment import experiment_figures
    from studio.tab_metrics import figures

    world.add_train_logs(RUN, 1, "train_planner", [{"step": 1, "loss": 0.69, "rewards/accuracies": 0.5}])
    run = figures(world, RUN)
    tie_rate = run["pairs"].layout.yaxis2
    assert _tick_labels(tie_rate, 0.002)[:4] == ["0.0%", "0.2%", "0.4%", "0.6%"]
    exp = experiment_figures(experiment_report(experiment, EXP))
    axes = [tie_rate, run["accuracy"].layout.yaxis, run["critic"].layout.yaxis, run["dpo_rewards"].layout.yaxis2,
            exp["held_out_accuracy"].layout.yaxis, exp["held_out_by_domain"].layout.yaxis2]
    for axis in axes:
        for step in STEPS:
            for drift in (1 - 1e-9, 1.0, 1 + 1e-9):  # a step plotly computed as 0.005000000000000001
                labels = _tick_labels(axis, step * drift)
                assert len(set(labels)) == len(labels), (step, labels)
            if step >= 0.01:
                assert _format_for(axis, step) == ".0%", step  # the tables' whole percents, as before
        assert axis.hoverformat == ".1%"


def test_the_pair_count_has_whole_number_ticks(world):
    """The pair count of a run with 3 pairs (or 92, the demo's) never reads "0.5" or "91.5": ticks from 0, a whole
    step apart, printed as integers; the tie rate's axis keeps its percent format."""
    from studio.tab_metrics import figures

    fig = figures(world, RUN)["pairs"]
    assert max(fig.data[0].y) == 3  # world: three effective pairs at iteration 0
    y = fig.layout.yaxis
    assert (y.tickmode, y.tick0, y.dtick, y.tickformat, y.rangemode) == ("linear", 0, 1, "d", "tozero")
    assert fig.layout.yaxis2.tickformat == ".0%" and fig.layout.yaxis2.dtick is None
    from studio.plots import COUNT_TICKS, count_axis

    for top in (0, 1, 3, 6, 7, 13, 92, 999, 1234, 60_000):
        axis = count_axis(top)
        assert isinstance(axis["dtick"], int) and axis["dtick"] >= 1 and top / axis["dtick"] <= COUNT_TICKS, top
        assert str(axis["dtick"]).lstrip("0")[0] in "125", top  # a 1-2-5 step
    assert count_axis(3)["dtick"] == 1 and count_axis(92)["dtick"] == 20


def test_dpo_reward_accuracies_have_their_own_percent_axis(world):
    """``rewards/accuracies`` is a share of pairs (0-1), the rewards and margins logits: the share on a right-hand
    percent axis of its own, its line saying so; the rewards stay on the left axis. Run B's share joins it."""
    from studio.tab_metrics import figures

    logs = [{"step": i, "loss": 0.7, "rewards/chosen": 0.1 * i, "rewards/margins": 2.0 * i,
             "rewards/accuracies": 0.25 * i} for i in (1, 2)]
    world.add_train_logs(RUN, 1, "train_planner", logs)
    other = "world-run-b"
    world.write("runs", [{"run_id": other, "name": "b", "config_json": {}, "run_dir": "runs/b"}])
    world.add_train_logs(other, 1, "train_planner", logs)
    fig = figures(world, RUN)["dpo_rewards"]
    axis_of = {t.name: t.yaxis for t in fig.data}
    assert axis_of == {"rewards/chosen": None, "rewards/margins": None, "rewards/accuracies (right axis)": "y2"}
    share = fig.layout.yaxis2
    assert (share.overlaying, share.side, share.tickformat, share.hoverformat) == ("y", "right", ".0%", ".1%")
    assert share.title.text == "share of pairs ranked right" and fig.layout.yaxis.title.text == "value"
    both = figures(world, RUN, other)["dpo_rewards"]
    assert {t.name: t.yaxis for t in both.data if "accuracies" in t.name} == {
        "A rewards/accuracies (right axis)": "y2", "B rewards/accuracies (right axis)": "y2"}
    grpo = "world-run-grpo"  # GRPO's logs carry no share: no right axis
    world.write("runs", [{"run_id": grpo, "name": "g", "config_json": {}, "run_dir": "runs/g"}])
    world.add_train_logs(grpo, 1, "train_planner", [{"step": 1, "loss": -0.1, "reward": 0.6}])
    alone = figures(world, grpo)["dpo_rewards"]
    assert [t.name for t in alone.data] == ["reward"] and "yaxis2" not in alone.layout.to_plotly_json()


def _lines(text: str | None) -> list[str]:
    return (text or "").split("<br>") if text else []


def _phone_ready(name: str, fig) -> None:
    """Title and subtitle in lines a phone's chart shows whole, the top margin as tall as them, the legend a row
    under the plot (not a column beside it)."""
    legend = fig.layout.legend
    assert legend.orientation == "h" and legend.yanchor == "bottom" and legend.xanchor == "left", name
    assert legend.yref == "container" and legend.y < 0.05 and legend.x < 0.05, name  # the chart's foot, left
    from studio.plots import MODEBAR, SUBTITLE_WIDTH, TITLE_LINE, TITLE_WIDTH

    title, subtitle = _lines(fig.layout.title.text), _lines(fig.layout.title.subtitle.text)
    assert title and all(len(line) <= TITLE_WIDTH for line in title), (name, title)
    assert all(len(line) <= SUBTITLE_WIDTH for line in subtitle), (name, subtitle)
    assert fig.layout.margin.t >= MODEBAR + TITLE_LINE * len(title), name


def test_charts_fit_a_phone(experiment):
    """Every run-view, experiment and Run-tab loss chart: titles wrapped to ``TITLE_WIDTH`` (the gap's "lower is
    better" a line of its own), what qualifies them in a subtitle, the legend a row under the plot; a chart with
    many legend entries grows taller rather than leave the plot a sliver."""
    from studio.metrics_experiment import experiment_figures
    from studio.run_loss import loss_figure
    from studio.tab_metrics import figures

    other = run_of("no_stage1", 11)
    experiment.add_train_logs(SWAP_RUN, 1, "train_planner", [{"step": 1, "loss": 0.69, "rewards/margins": 0.1}])
    one, both = figures(experiment, SWAP_RUN), figures(experiment, SWAP_RUN, other)
    exp = experiment_figures(experiment_report(experiment, EXP))
    charts = {**{f"run {n}": f for n, f in one.items() if f.data},
              **{f"A+B {n}": f for n, f in both.items() if f.data},
              **{f"experiment {n}": f for n, f in exp.items()}, "loss": loss_figure(experiment, SWAP_RUN)}
    for name, fig in charts.items():
        _phone_ready(name, fig)
    for fig in (one["gap_ppl"], one["gap_logppl"], exp["held_out_gap_ppl"]):
        assert _lines(fig.layout.title.text)[-1] == "lower is better"
    assert one["accuracy"].layout.title.subtitle.text == "bars: 95% Wilson interval"
    assert both["accuracy"].layout.height > one["accuracy"].layout.height  # 8 entries, not 4: a taller chart
    from studio.plots import TITLE_WIDTH, wrap

    # wrap: " · " parts kept whole and together while they fit, words never cut, lines broken by hand kept
    assert wrap("Pairs and tie rate · not trained on: the planner learns by GRPO", TITLE_WIDTH) == (
        "Pairs and tie rate<br>not trained on: the planner learns by GRPO")
    assert wrap("a · b<br>c", TITLE_WIDTH) == "a · b<br>c"
    assert wrap("held-out " * 9, 20).split("<br>") == ["held-out held-out"] * 4 + ["held-out"]


def test_empty_chart_notes_fit_a_phone(world):
    """An empty chart's note in lines a phone's chart shows whole (a 60-character line was cut at both ends)."""
    from studio.plots import NOTE_WIDTH
    from studio.tab_metrics import figures

    world.write("runs", [{"run_id": "just-started", "name": "x", "config_json": "{}", "run_dir": "runs/x"}])
    world.set_stage("just-started", IT + 1, "critique", "skipped",
                    counts={"note": "no critic (stages.grounder_data = raw): SFT on the grounder's own groundings"})
    for name, fig in figures(world, "just-started").items():
        notes = [a.text for a in fig.layout.annotations]
        assert notes and all(len(line) <= NOTE_WIDTH for text in notes for line in _lines(text)), (name, notes)
    assert NOTE_WIDTH <= 40
