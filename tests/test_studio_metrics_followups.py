"""The Metrics tab's follow-ups: the line-gap helper shared by every logged-step line lives with ``line`` in
``studio.plots``; the pairs chart draws what DPO trained on in an iteration already trained (a tie made since does not
move that point) and the curated count, labelled so, for one not trained yet; a long legend on a phone is capped and
scrolls, so the chart does not grow into a column of legend under a small plot. Hand-made stores
(``tests/_store_world.py``, ``tests/_experiment_world.py``), no models.
"""

from __future__ import annotations

import pytest

from engine.store import Store
from tests._experiment_world import SWAP_RUN, build_experiment, run_of
from tests._store_world import IT, RUN, world_store


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


def test_iteration_gaps_lives_beside_line():
    from studio.plots import iteration_gaps

    points = [(1, 0.7, 1), (2, 0.6, 1), (3, 0.69, 2)]
    assert iteration_gaps(points) == [(1, 0.7), (2, 0.6), (2.5, None), (3, 0.69)]
    assert iteration_gaps([]) == []


def _pairs(fig) -> dict[str, list]:
    return {t.name: list(t.y) for t in fig.data if t.yaxis != "y2"}


def test_a_trained_iterations_pair_point_does_not_move_with_later_curation(world):
    """World: three effective pairs at iteration 0. Before its train_planner is done the point is the curated count,
    named so; once done, the point is the rows the stage recorded, and a tie made after the training leaves it
    where it was (the checkpoint was trained on three pairs), while the tie rate follows the curation."""
    from engine.curation import tie_pair
    from studio.tab_metrics import figures

    assert _pairs(figures(world, RUN)["pairs"]) == {"pairs as curated (untrained)": [3]}
    tie_pair(world, RUN, IT, "m2", curator="ann")  # not trained yet: the curated count follows
    assert _pairs(figures(world, RUN)["pairs"]) == {"pairs as curated (untrained)": [2]}
    world.set_stage(RUN, IT, "train_planner", "done", counts={"rows": 2})
    assert _pairs(figures(world, RUN)["pairs"]) == {"pairs in training": [2]}
    tie_pair(world, RUN, IT, "q1", curator="bob")  # after the training: the trained point stays
    fig = figures(world, RUN)["pairs"]
    assert _pairs(fig) == {"pairs in training": [2]}
    assert [list(t.y) for t in fig.data if t.yaxis == "y2"] == [[pytest.approx(2 / 3)]]  # the tie rate as now
    world.set_stage(RUN, IT, "train_planner", "running")  # a redo under way: not trained on these yet
    assert _pairs(figures(world, RUN)["pairs"]) == {"pairs as curated (untrained)": [1]}


def test_a_long_legend_is_capped_and_scrolls(tmp_path):
    """Two runs' gap lines over six split/domains: twelve legend rows on a phone made the chart 560 px tall, the
    legend (238 px in Chromium at 320 px wide) over a plot of 187. The chart grows by at most ``LEGEND_MAX_ROWS``
    rows and the legend box is capped there (``legend.maxheight``: it scrolls); a short legend is not capped."""
    from studio import plots
    from studio.tab_metrics import figures

    other = run_of("no_stage1", 11)
    with Store(tmp_path / "exp.duckdb") as s:
        build_experiment(s)
        short = figures(s, SWAP_RUN, other)["gap_ppl"]
        domains = ("maths", "qa", "code", "web")
        for run_id in (SWAP_RUN, other):
            s.put_metrics(run_id, 0, [{"split": "held_out", "domain": d, "name": "gap_ppl", "value": 2.0}
                                      for d in domains])
        long = figures(s, SWAP_RUN, other)["gap_ppl"]
    assert len(long.data) == 12 and len(short.data) == 4
    assert long.layout.legend.maxheight is not None and long.layout.height < plots.HEIGHT + 10 * plots.LEGEND_ROW
    cap = getattr(plots, "LEGEND_MAX_ROWS", None)
    assert long.layout.height == plots.HEIGHT + plots.LEGEND_ROW * (cap - plots.LEGEND_ROWS)
    assert long.layout.legend.maxheight == plots.LEGEND_ROW * cap + 10
    assert short.layout.legend.maxheight is None and short.layout.height < long.layout.height


def test_each_call_of_the_figures_draws_them(world, monkeypatch):
    """The figures are drawn at every call, the same run A and B drawn last included: the page's second call of a load
    was an echo of the run picker's change fired again (an event still running for the load asked for once more), and
    a guard skipped a run change to the pair drawn last. The picker's change now reaches the figures through a copy of
    their own (``studio.relay``), fired once per run; a second call for the same pair is a Refresh or a live redraw
    that came while the first ran, and the guard would have dropped it."""
    from types import SimpleNamespace

    from studio import tab_metrics
    from tests._store_world import studio_fns

    draw = studio_fns(world)["metrics_figures"]
    drew: list[tuple] = []
    real = tab_metrics.figures
    monkeypatch.setattr(tab_metrics, "figures", lambda *a, **k: drew.append(a[1:]) or real(*a, **k))
    ann = SimpleNamespace(session_hash="ann", username=None)
    first = draw.fn(RUN, "", ann)
    again = draw.fn(RUN, "", ann)
    assert first[0] is not None and again[0] is not None and drew == [(RUN, ""), (RUN, "")]


def test_fired_by_knows_the_sessions_copy_of_a_component(world):
    """In a served app an event names Gradio's per-session copy of a component once a handler has sent it a prop update
    (the run picker after the load's ``gr.update(choices=...)``: a new instance with a new ``_id``, built from the
    constructor arguments, as gradio.blocks' postprocess does), not the component built here: a check by ``_id`` never
    matched it. ``common.fired_by`` knows the copy by its class and ``elem_id``."""
    from types import SimpleNamespace

    from studio.common import fired_by
    from tests._store_world import studio_fns

    draw = studio_fns(world)["metrics_figures"]
    run_picker, compare = draw.inputs[0], draw.inputs[1]
    session_copy = type(run_picker)(**{**run_picker.constructor_args, "render": False})
    assert session_copy._id != run_picker._id and fired_by(SimpleNamespace(target=session_copy), run_picker)
    assert not fired_by(SimpleNamespace(target=session_copy), compare)  # another picker, another elem_id
    assert not fired_by(SimpleNamespace(target=None), run_picker) and not fired_by(None, run_picker)
