"""The page's timers cost the browser little when nothing happens (studio.pace, studio.redraw): the Run tab's refresh
sends only what changed since it last drew (an unchanged loss chart is not even built), and both timers slow to
``IDLE_S`` while no job runs and speed up while one does. In a real browser, an idle page asks the server at most
once per timer in a window shorter than the idle pace (it asked about 7 times in 9 s at 2 s and 3 s)."""

from __future__ import annotations

import threading

import gradio as gr
import pandas as pd
import pytest

from studio.pace import IDLE_S, RUN_TAB_BUSY_S, SYNC_BUSY_S
from studio.redraw import only_changed, signature
from tests._store_world import RUN, world_store
from tests._studio import blocking_job


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


def _skipped(output) -> bool:
    """``gr.skip()`` (a DataFrame or figure output compares element-wise, so compare dicts only)."""
    return isinstance(output, dict) and output == gr.skip()


def _endpoint(demo, api_name: str):
    return next(f.fn for f in demo.fns.values() if f.api_name == api_name)


def test_only_changed_builds_and_sends_only_what_differs():
    built: list[str] = []

    def part(sig: str, value: str):
        return sig, lambda: built.append(value) or value

    outputs, drawn = only_changed(None, [part("a", "A"), part("b", "B")])
    assert outputs == ["A", "B"] and drawn == ["a", "b"]  # nothing drawn yet: everything
    built.clear()
    outputs, drawn = only_changed(drawn, [part("a", "A"), part("c", "C")])
    assert outputs == [gr.skip(), "C"] and built == ["C"] and drawn == ["a", "c"]  # "A" was not even built
    outputs, _ = only_changed(["a"], [part("a", "A"), part("c", "C")])  # another layout: everything again
    assert outputs == ["A", "C"]


def test_a_signature_sees_a_change_in_a_long_tables_middle():
    frame = pd.DataFrame({"step": range(300), "loss": [1.0] * 300})
    changed = frame.copy()
    changed.loc[150, "loss"] = 2.0  # a DataFrame's repr elides row 150
    assert repr(frame) == repr(changed)
    assert signature(frame) != signature(changed)
    assert signature(("run", frame)) != signature(("run", changed)) and signature(frame) == signature(frame.copy())


def test_the_run_tab_refresh_sends_nothing_until_something_changes(world):
    from studio.app import build_app

    demo = build_app(world, "examples/demo.toml")
    try:
        refresh = _endpoint(demo, "run_refresh")
        *first, drawn = refresh(RUN, None, "")
        assert not any(_skipped(out) for out in first[:5])  # the first tick draws everything
        assert first[4].value == IDLE_S  # no job: the idle pace
        *again, drawn = refresh(RUN, drawn)
        assert all(_skipped(out) for out in again)  # nothing changed: nothing sent, the chart not rebuilt
        world.add_train_logs(RUN, 1, "train_planner", [{"step": 1, "loss": 0.5}])
        *after, drawn = refresh(RUN, drawn)
        assert not _skipped(after[3])  # the loss chart is drawn again (the pipeline's cards may say so too)
        assert _skipped(after[1]) and _skipped(after[2]) and _skipped(after[4])  # job log, stage table, pace: not
        assert all(_skipped(out) for out in refresh(RUN, drawn)[:5])

        started = threading.Event()
        assert demo.moat_jobs.submit("next_stage", RUN, blocking_job(started, 1, 4, 5.0, 0.05), user="t") is None
        assert started.wait(10)
        *busy, drawn = refresh(RUN, drawn)
        assert busy[4].value == RUN_TAB_BUSY_S  # a job runs: the busy pace
        assert not _skipped(busy[1])  # and the job panel shows it
        demo.moat_jobs.stop()
        assert demo.moat_jobs.wait(15)
        *idle, message, _ = refresh(RUN, drawn, f"Started `next_stage` on `{RUN}`.")
        assert idle[4].value == IDLE_S and not _skipped(idle[1])  # how the job ended, then the idle pace
        assert "was stopped" in message  # the line that announced the job says how it ended, in the same event
    finally:
        demo.close()


def test_the_iteration_sync_follows_the_job_workers_pace(world):
    from studio.app import build_app

    demo = build_app(world, "examples/demo.toml")
    try:
        sync = _endpoint(demo, "studio_sync_iterations")
        *_, timer, pace = sync(RUN, 1, None, None)
        assert timer.value == IDLE_S == pace
        assert _skipped(sync(RUN, 1, None, pace)[2])  # the same pace is not sent again
        started = threading.Event()
        assert demo.moat_jobs.submit("next_stage", RUN, blocking_job(started, 1, 4, 5.0, 0.05), user="t") is None
        assert started.wait(10)
        *_, timer, pace = sync(RUN, 1, None, pace)
        assert timer.value == SYNC_BUSY_S == pace
        demo.moat_jobs.stop()
        assert demo.moat_jobs.wait(15)
    finally:
        demo.close()
