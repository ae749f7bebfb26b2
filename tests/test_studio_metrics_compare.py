"""The Metrics tab's run view with a compare run B (``studio.metrics_compare``), through the app's own handlers on the
hand-made experiment store of ``tests/_experiment_world.py`` (no models): B's choices leave out a run without
evaluation rows, the tables (run A's alone) say so once B is drawn, and a line cautions when A and B were evaluated
on different task sets, by count (the ``n`` metric) or by task ids (``eval_traces``).

In that world every run has ``n`` = 100 per split and iteration; only ``SWAP_RUN`` has traces (held-in h1..h6,
held-out o1..o4) and a swap table.
"""

from __future__ import annotations

import pytest

from engine.store import Store
from tests._experiment_world import SWAP_RUN, TRACES, build_experiment, run_of
from tests._store_world import studio_fns

OTHER = run_of("no_stage1", 11)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "exp.duckdb") as s:
        build_experiment(s)
        yield s


@pytest.fixture
def fns(store):
    return studio_fns(store)


def _draw(fns, run_a: str, run_b: str | None) -> tuple[str, str, str]:
    """The run view's (changes, swaps, caution) as the page's draw returns them, after the figures."""
    *_, changes, swaps, caution = fns["metrics_figures"].fn(run_a, run_b)
    return changes, swaps, caution


def _traces(run_id: str, ids: dict[str, str], iteration: int = 0) -> list[dict]:
    return [{"run_id": run_id, "iteration": iteration, "task_id": task, "split": split, "domain": "maths", "plan": "",
             "actions": "", "answer": None, "correct": True, "gold_logppl": None, "trace_json": {}}
            for task, split in ids.items()]


def test_compare_choices_leave_out_runs_without_evaluation_rows(store, fns):
    """A run with no metrics yet drew nothing beside A: it is not offered; A itself is not either."""
    store.write("runs", [{"run_id": "fresh", "name": "fresh", "config_json": {}, "run_dir": "runs/fresh"}])
    update = fns["metrics_runs"].fn(SWAP_RUN)
    choices = update["choices"]
    assert choices[0] == "" and update["value"] == ""
    assert "fresh" not in choices and SWAP_RUN not in choices
    assert set(choices[1:]) == {run_of(v, s) for v in ("full", "no_stage1") for s in (11, 12)} - {SWAP_RUN}
    store.put_metrics("fresh", 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}])
    assert "fresh" in fns["metrics_runs"].fn(SWAP_RUN)["choices"]  # evaluated now: offered


def test_the_tables_say_they_are_run_as_once_b_is_drawn(store, fns):
    """With B picked, the iteration-to-iteration tests and the swap table are still A's: each is led by
    "run A: <id>"; alone, A's tables read as before. The swap job's redraw keeps the label (the compare run this
    session drew)."""
    changes, swaps, _ = _draw(fns, SWAP_RUN, None)
    assert changes.startswith("**Iteration-to-iteration change**") and swaps.startswith("**Swap table** of")
    changes, swaps, _ = _draw(fns, SWAP_RUN, OTHER)
    label = f"**run A: `{SWAP_RUN}`** · "
    assert changes.startswith(label + "**Iteration-to-iteration change**"), changes[:120]
    assert swaps.startswith(label + "**Swap table** of"), swaps[:120]
    redrawn, swaps_after, ended, _timer = fns["metrics_swap_watch"].fn(SWAP_RUN)  # no swap job runs: it ended
    assert redrawn == changes and swaps_after == swaps and "finished" in ended
    _draw(fns, SWAP_RUN, "")  # B emptied again
    assert fns["metrics_swap_watch"].fn(SWAP_RUN)[0].startswith("**Iteration-to-iteration change**")


def test_a_caution_names_the_task_sets_that_differ(store, fns):
    """Equal counts and no traces to compare: no caution. A count that differs on a split both have (per
    iteration's ``n``), or the same count of other task ids (both with traces): one line naming it, per split."""
    assert _draw(fns, SWAP_RUN, OTHER)[2] == ""  # n = 100 everywhere; OTHER has no traces to compare ids by
    assert _draw(fns, SWAP_RUN, None)[2] == ""
    store.put_metrics(OTHER, 2, [{"split": "held_out", "domain": "all", "name": "n", "value": 50.0}])
    caution = _draw(fns, SWAP_RUN, OTHER)[2]
    assert caution == ("⚠ Runs A and B were evaluated on different task sets, so their accuracies are not directly "
                       "comparable: held-out A 100 vs B 50–100 tasks.")
    # held-in: B's traces cover six tasks, one of them not A's (A: h1..h6 over its iterations)
    ids = {task: "held_in" for task in TRACES[0] if task.startswith("h")}
    store.write("eval_traces", _traces(OTHER, {**{t: s for t, s in ids.items() if t != "h6"}, "x6": "held_in"}))
    caution = _draw(fns, SWAP_RUN, OTHER)[2]
    assert caution.endswith(": held-in 100 tasks each, not the same ones; held-out A 100 vs B 50–100 tasks.")
    store.delete("eval_traces", OTHER)
    store.write("eval_traces", _traces(OTHER, ids, iteration=1))  # the same six tasks, in another iteration
    assert _draw(fns, SWAP_RUN, OTHER)[2].endswith(": held-out A 100 vs B 50–100 tasks.")
    # a split one run alone was evaluated on is no comparison of accuracies: not named
    store.put_metrics(OTHER, 0, [{"split": "dev", "domain": "all", "name": "n", "value": 20.0}])
    assert "dev" not in _draw(fns, SWAP_RUN, OTHER)[2]


def test_the_caution_reads_two_small_grouped_queries(store, monkeypatch):
    """Cheap: one grouped query of ``metrics`` and one of ``eval_traces``, whatever the number of splits."""
    from studio.metrics_compare import task_set_caution

    asked = []
    query = store.query
    monkeypatch.setattr(store, "query", lambda sql, params=None: asked.append(sql) or query(sql, params))
    task_set_caution(store, SWAP_RUN, OTHER)
    assert len(asked) == 2 and all("GROUP BY run_id, split" in sql for sql in asked)
    assert task_set_caution(store, SWAP_RUN, SWAP_RUN) == task_set_caution(store, SWAP_RUN, None) == ""
    assert len(asked) == 2  # no compare run: nothing read


def test_the_compare_list_is_listed_again_on_refresh_and_keeps_the_pick(store):
    """A run evaluated after run A was picked showed in the compare box only after a page reload: the list was built
    on run A's change alone. Refresh and the Metrics tab shown list it again and send no value, so the box keeps
    its pick (in Chromium too: B stays drawn) and nothing is redrawn again; a new run A still empties the box. Not on
    a live redraw, which can come while the box is open (the page answers an update of a focused box with ""). A B
    the session drew that is no longer offered (it became run A while the run's change waited) is cleared."""
    from types import SimpleNamespace

    import gradio as gr

    from studio.app import build_app
    from tests._store_world import app_fns

    demo = build_app(store, "examples/demo.toml")
    fns = app_fns(demo)
    runs = fns["metrics_runs"]
    run_a = runs.inputs[0]
    assert [event for _, event in runs.targets].count("click") == 1  # Refresh lists the runs again
    refresh = next(block for block, event in runs.targets if event == "click")
    # Run A's change reaches it through a copy of its own (studio.relay), not the run picker's change itself.
    own = [block for block, event in runs.targets
           if event == "change" and "moat-own-change" in (demo.blocks[block].elem_classes or [])]
    assert len(own) == 1 and (run_a._id, "change") not in runs.targets
    changes = [block for block, event in runs.targets if event == "change" and block not in own]
    # This tab shown (a value set in the browser only when it is: SHOWN_JS); no live redraw
    assert [demo.blocks[block].elem_id for block in changes] == ["metrics-shown"]
    assert runs.fn(SWAP_RUN)["value"] == ""  # run A's change: the box emptied
    store.write("runs", [{"run_id": "late", "name": "late", "config_json": {}, "run_dir": "runs/late"}])
    store.put_metrics("late", 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}])
    session = SimpleNamespace(session_hash="s1", username=None)
    for target in (refresh, *changes):
        update = runs.fn(SWAP_RUN, gr.EventData(SimpleNamespace(_id=target), None), session)
        assert "late" in update["choices"] and OTHER in update["choices"], target
        assert "value" not in update, target  # the pick stays as the page holds it
    assert runs.fn(SWAP_RUN, gr.EventData(demo.blocks[own[0]], None), session)["value"] == ""  # a new run A
    # The session drew B = OTHER; OTHER then became run A: the list no longer holds it, so the box is cleared.
    fns["metrics_figures"].fn(SWAP_RUN, OTHER, session)
    update = runs.fn(OTHER, gr.EventData(SimpleNamespace(_id=refresh), None), session)
    assert OTHER not in update["choices"] and update["value"] == ""
