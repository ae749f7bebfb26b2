"""The data tabs reload by themselves once a stage they read ends for the run and iteration they show
(``studio.live_views``): a browser audit found Pairs, Critic and Metrics stuck on "iteration 1 has no pairs yet" after
the first visit's demo run had written them, until a page reload.

Handler-level tests call ``build_app``'s functions by endpoint name on the hand-made store of ``tests/_store_world.py``
(no models) and write stage records straight into it; the one browser test writes an iteration's pairs into the store
the served app holds and watches the Pairs table fill without a reload or a key press.
"""

from __future__ import annotations

import re

import pytest

from engine.store import Store
from tests._store_world import IT, RUN, auto_pair_rows, studio_fns, world_store

CURATOR = "rita"
VIEW = f"{RUN}\n{IT}"
# A Pairs load's inputs after the run and the iteration: min, max, text, overridden, excluded, ties, order, page.
PAIRS_FILTERS = ("", "", "", "any", "any", "any", "task", 1)


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def fns(store):
    return studio_fns(store)


def _watched(fns) -> list[str]:
    """The tabs whose triggers the check sends, in its output order."""
    from studio import live_views

    triggers = fns["live_views_shown"].outputs
    by_trigger = {}
    for tab in live_views.READS:
        load = {"plans": "plans_search", "pairs": "pairs_search", "critic": "critic_queue",
                "metrics": "metrics_figures"}[tab]
        for block_id, event in fns[load].targets:
            if event == "change" and any(t._id == block_id for t in triggers):
                by_trigger[block_id] = tab
    return [by_trigger[t._id] for t in triggers]


def _check(fns, tab: str, view: str = VIEW) -> dict:
    """The check at a switch to ``tab`` (the tick's check too): each watched tab's trigger update, by tab."""
    return dict(zip(_watched(fns), fns["live_views_shown"].fn(view, tab, None)))


def _load_pairs(fns, it=IT, current=None):
    return fns["pairs_search"].fn(RUN, it, *PAIRS_FILTERS, current, CURATOR, None)


def test_a_stage_the_pairs_tab_reads_changes_its_stamp_and_an_unrelated_one_does_not(store):
    """Pairs' stamp moves when its own stages end (pairs, and train_planner: the line's "trained already" warning), not
    when they start, and not when critique or ground end (a curator reviewing iteration 1's pairs while ground and
    critique run for it is the normal case). Metrics' stamp spans the whole run."""
    from studio.live_views import READS, stamp

    def of(tab: str, iteration=IT) -> str:
        return stamp(store, RUN, iteration, READS[tab])

    before = {tab: of(tab) for tab in ("pairs", "critic", "plans")}
    metrics = of("metrics", None)
    store.set_stage(RUN, IT, "pairs", "running")
    assert of("pairs") == before["pairs"]  # started: nothing new to show yet
    store.set_stage(RUN, IT, "pairs", "done")
    after_pairs = of("pairs")
    assert after_pairs != before["pairs"] and of("plans") != before["plans"]  # the plans view marks chosen/rejected
    assert of("critic") == before["critic"]
    for stage in ("ground", "critique"):
        store.set_stage(RUN, IT, stage, "running")
        store.set_stage(RUN, IT, stage, "done")
    assert of("pairs") == after_pairs and of("critic") != before["critic"]
    store.set_stage(RUN, IT, "train_planner", "done")
    assert of("pairs") != after_pairs
    assert of("pairs", IT + 1) == ""  # another iteration's records are not this view's
    store.set_stage(RUN, IT + 1, "evaluate", "done")
    assert of("metrics", None) != metrics  # an evaluation of any iteration redraws the run's charts
    assert stamp(store, None, IT, READS["pairs"]) == ""


def test_the_pairs_tab_is_sent_a_reload_once_when_its_stage_ends_and_never_for_an_unrelated_one(store, fns):
    """The shown tab's trigger gets a new value (its load, the one a view change runs, listens to it) exactly once
    per change of its stamp since the load read; every other output, and every check with nothing new, is a skip."""
    import gradio as gr

    assert _watched(fns) == ["plans", "pairs", "critic", "metrics"]
    _load_pairs(fns)  # the view's load: reads under the stamp of now
    assert all(v == gr.skip() for v in _check(fns, "pairs").values())
    store.set_stage(RUN, IT, "critique", "done")  # unrelated to Pairs
    assert all(v == gr.skip() for v in _check(fns, "pairs").values())
    store.set_stage(RUN, IT, "pairs", "done")
    assert all(v == gr.skip() for v in _check(fns, "run").values())  # the Run tab shown: nothing is watched there
    sent = _check(fns, "pairs")
    assert isinstance(sent["pairs"], str) and all(v == gr.skip() for t, v in sent.items() if t != "pairs")
    assert all(v == gr.skip() for v in _check(fns, "pairs").values())  # sent once, before the load has even run
    _load_pairs(fns)  # the reload it asked for
    assert all(v == gr.skip() for v in _check(fns, "pairs").values())


def test_no_reload_is_sent_for_a_view_whose_own_load_has_not_read_it(store, fns):
    """A check for a view other than the one the tab's last load read (the view changed; its load is about to run)
    sends nothing: that load reads what is new. Nor does one for a session no load has recorded (it counts from
    then), nor a check without an iteration for an iteration's tab."""
    import gradio as gr

    store.set_stage(RUN, IT, "pairs", "done")
    assert _check(fns, "pairs")["pairs"] == gr.skip()  # no load yet in this session: the stamp of now recorded
    store.set_stage(RUN, IT, "train_planner", "done")
    assert isinstance(_check(fns, "pairs")["pairs"], str)
    _load_pairs(fns, it=IT + 1)  # the curator picked another iteration
    store.set_stage(RUN, IT, "pairs", "running")
    store.set_stage(RUN, IT, "pairs", "done")
    assert _check(fns, "pairs", VIEW)["pairs"] == gr.skip()  # a tick carrying the old view
    assert _check(fns, "pairs", f"{RUN}\n")["pairs"] == gr.skip()


def test_a_load_that_begins_while_the_check_reads_wins(store, fns, monkeypatch):
    """Never over a newer read: a load that records what it reads while a check is reading the stamp makes the check
    send nothing (that load shows the new data already)."""
    import gradio as gr

    from studio import live_views

    _load_pairs(fns)
    store.set_stage(RUN, IT, "pairs", "done")
    read = live_views.stamp
    loaded: list[bool] = []

    def then_a_load(*args, **kwargs):
        value = read(*args, **kwargs)
        if not loaded:
            loaded.append(True)
            _load_pairs(fns)
        return value

    monkeypatch.setattr(live_views, "stamp", then_a_load)
    assert _check(fns, "pairs")["pairs"] == gr.skip() and loaded


def test_a_live_reload_keeps_the_curators_pick_and_fills_an_empty_picker(store, fns):
    """What the live reload runs is the tab's load: a pick still on the page stays (the update carries no value), an
    empty queue's picker takes the first pair once the pairs exist."""
    empty = _load_pairs(fns, it=IT + 1)
    assert empty[0].startswith("0 rows") and empty[2]["value"] is None
    kept = _load_pairs(fns, current="m2|0|0")
    assert "value" not in kept[2] and len(kept[1]) == 3
    store.write("pairs", [{**row, "iteration": IT + 1} for row in auto_pair_rows()])
    for table in ("plans", "scores"):
        store.write(table, [{**r, "iteration": IT + 1} for r in store.frame(table, RUN, IT).to_dict("records")])
    filled = _load_pairs(fns, it=IT + 1)
    assert filled[0].startswith("3 rows") and filled[2]["value"] == "m1|0|0"


def test_metrics_follows_the_compare_run_it_draws_beside_run_a(store, fns):
    """Metrics draws a compare run beside run A: a stage ending in that run redraws the charts too, and once the
    compare box is emptied again, that run's stages no longer matter."""
    import gradio as gr

    other = "world-run-b"
    store.write("runs", [{"run_id": other, "name": "b", "config_json": {}, "run_dir": "runs/b"}])
    fns["metrics_figures"].fn(RUN, other)
    assert _check(fns, "metrics")["metrics"] == gr.skip()
    store.set_stage(other, 1, "evaluate", "done")
    assert isinstance(_check(fns, "metrics")["metrics"], str)  # the compare run's evaluation: redraw
    assert _check(fns, "metrics")["metrics"] == gr.skip()  # once
    fns["metrics_figures"].fn(RUN, "")  # no compare run any more
    store.set_stage(other, 2, "evaluate", "done")
    assert _check(fns, "metrics")["metrics"] == gr.skip()
    store.set_stage(RUN, IT + 2, "evaluate", "done")
    assert isinstance(_check(fns, "metrics")["metrics"], str)


def test_the_critic_and_metrics_views_and_the_plans_list_follow_their_stages(store, fns):
    """Critic: critique's end (not pairs'); Metrics: any iteration's evaluate, read run-wide (the view's iteration
    does not matter); Plans: its load keeps the task shown while it is on the page."""
    import gradio as gr

    fns["critic_queue"].fn(RUN, IT, "", "any", "task", 1, None, CURATOR, None)
    fns["metrics_figures"].fn(RUN, None)
    store.set_stage(RUN, IT, "pairs", "done")
    assert _check(fns, "critic")["critic"] == gr.skip() and _check(fns, "metrics")["metrics"] != gr.skip()
    assert _check(fns, "metrics")["metrics"] == gr.skip()
    store.set_stage(RUN, IT, "critique", "done")
    assert isinstance(_check(fns, "critic")["critic"], str)
    store.set_stage(RUN, IT + 3, "evaluate", "done")
    assert isinstance(_check(fns, "metrics", f"{RUN}\n")["metrics"], str)
    load = fns["plans_search"].fn
    kept = load(RUN, IT, "", "", "", 1, [RUN, IT, "m2", None])[2]
    assert "value" not in kept and "m2" in kept["choices"]
    assert load(RUN, IT, "", "", "", 1)[2]["value"] == "m1"
    # After a live reload kept the task: its plans drawn again, the diff's picks kept; another task is the picker's.
    redraw = fns["plans_task_redraw"].fn
    plans, a, b, _diff, drawn = redraw(RUN, IT, "m1", [RUN, IT, "m1", None], 7, "0:1", "0:2")
    assert "k=" in plans and (a["value"], b["value"]) == ("0:1", "0:2") and drawn == [RUN, IT, "m1", 7]
    assert redraw(RUN, IT, "m1", drawn, 7, "0:1", "0:2") == (gr.skip(),) * 5
    assert redraw(RUN, IT, "m2", drawn, 7, "0:1", "0:2") == (gr.skip(),) * 5
    assert redraw(RUN, IT + 1, "m1", drawn, 7, "0:1", "0:2")[1]["value"] != "0:1"  # another iteration: its own picks


def test_the_timer_is_off_until_a_watched_tab_is_shown_and_keeps_the_busy_pace_while_a_job_runs(fns, monkeypatch):
    """One timer for every watched tab, switched in the browser (no server call) by the view key and the tab shown;
    its tick sends its new interval only when the pace changes (studio.pace: faster while a job runs)."""
    import gradio as gr

    from studio import live_views
    from studio.pace import IDLE_S, LIVE_BUSY_S

    on = fns["live_views_on"]
    (timer,) = on.outputs
    assert isinstance(timer, gr.Timer) and not timer.active and on.fn is None
    assert [c.elem_id for c in on.inputs] == ["view-key", "tab-key"]
    assert "'pairs'" in on.js and "'metrics'" in on.js and "'run'" not in on.js
    tick = fns["live_views_check"]
    assert tick.targets == [(timer._id, "tick")] and tick.outputs[-2] is timer
    *_, pace, paced = tick.fn(VIEW, "pairs", None, None)
    assert pace == gr.update(value=IDLE_S) and paced == IDLE_S
    assert tick.fn(VIEW, "pairs", IDLE_S, None)[-2] == gr.skip()
    monkeypatch.setattr(live_views, "poll_seconds", lambda jobs, busy: busy)  # a job runs
    assert tick.fn(VIEW, "pairs", IDLE_S, None)[-2:] == (gr.update(value=LIVE_BUSY_S), LIVE_BUSY_S)


def _live(fns, tab: str):
    """The event a live reload of ``tab`` runs its load with: its target is the tab's trigger (the hidden textbox the
    check sends; matched by id, as ``_watched`` does)."""
    import gradio as gr

    load = {"plans": "plans_search", "pairs": "pairs_search", "critic": "critic_queue"}[tab]
    triggers = {t._id: t for t in fns["live_views_shown"].outputs}
    trigger = next(triggers[block_id] for block_id, event in fns[load].targets
                   if event == "change" and block_id in triggers)
    return gr.EventData(trigger, {})


def test_a_live_reload_reads_the_filters_last_applied_never_text_typed_and_not_submitted(store, fns):
    """The Search / Min / Max boxes apply on Enter only. A live reload read them as they stood: a curator typing
    "-0.5" into Min margin when the pairs stage ended got "margin bounds must be numbers, got '-'" (and, the stamp
    recorded before the read raised, the reload was lost); half-typed Search text was applied. It now reads what the
    session's last load applied, as the action reloads do; and a load that refuses a submitted filter takes no stamp
    as seen. The Plans tab's Search is the same; the Critic tab has no text filter."""
    import gradio as gr

    search = fns["pairs_search"].fn
    live = _live(fns, "pairs")
    # Nothing applied yet (a fresh session): no text filter, whatever the boxes hold.
    fresh = search(RUN, IT, "-", "", "Ada", *PAIRS_FILTERS[3:], None, CURATOR, None, evt=live)
    assert fresh[0].startswith("3 rows") and fresh[6] == ["", "", ""]
    applied = search(RUN, IT, "", "", "Tom", *PAIRS_FILTERS[3:], None, CURATOR, None)  # "Tom", Enter
    assert applied[0].startswith("1 row") and applied[6] == ["", "", "Tom"]
    store.set_stage(RUN, IT, "pairs", "done")
    assert isinstance(_check(fns, "pairs")["pairs"], str)
    # Typed, not submitted: "-" of "-0.5" in Min margin, "Ada" over "Tom" in Search.
    out = search(RUN, IT, "-", "", "Ada", *PAIRS_FILTERS[3:], "m1|0|0", CURATOR, None, evt=live)
    assert out[0].startswith("1 row") and list(out[1]["key"]) == ["m1|0|0"] and out[6] == ["", "", "Tom"]
    # The curator submits a bound that is no number: refused, and the stamp that load would have drawn is not seen.
    store.set_stage(RUN, IT, "train_planner", "done")
    with pytest.raises(gr.Error, match="margin bounds must be numbers"):
        search(RUN, IT, "-", "", "Tom", *PAIRS_FILTERS[3:], "m1|0|0", CURATOR, None)
    assert isinstance(_check(fns, "pairs")["pairs"], str)  # still sent: the page shows the stamp before
    again = search(RUN, IT, "-", "", "", *PAIRS_FILTERS[3:], "m1|0|0", CURATOR, None, evt=live)
    assert again[0].startswith("1 row") and "trained on these pairs already" in again[0]
    # Plans: its Search too applies on Enter only.
    plans = fns["plans_search"].fn
    assert plans(RUN, IT, "Ada", "", "", 1)[0].startswith("1 row")
    assert plans(RUN, IT, "zebra", "", "", 1, None, None, evt=_live(fns, "plans"))[0].startswith("1 row")
    assert not any(getattr(i, "label", "") in ("Search", "Min margin", "Max margin")
                   for i in fns["critic_queue"].inputs if isinstance(i, gr.Textbox))


def test_a_live_reload_keeps_a_pick_an_action_took_off_the_filtered_page(store, fns):
    """Critic, *Reviewed = no*: the curator accepts m2's correction; m2 leaves the filtered page but stays picked
    (the action's reload sends choices only) and the curator starts an edit of it. train_grounder then ends: the live
    reload put the picker on the page's first verdict, whose change redrew the view and replaced the edit. It now
    sends choices only (m2's own label among them); only an empty picker takes the first item. Pairs alike."""
    from engine import curation, verdict_curation

    load = fns["critic_queue"].fn
    live = _live(fns, "critic")
    first = load(RUN, IT, "", "no", "task", 1, None, CURATOR, None)
    assert "m2|0|0" in list(first[1]["key"]) and first[2]["value"] == "m1|0|0"
    verdict_curation.accept_correction(store, RUN, IT, "m2", 0, 0, curator=CURATOR)
    store.set_stage(RUN, IT, "train_grounder", "done")
    assert isinstance(_check(fns, "critic")["critic"], str)
    out = load(RUN, IT, "", "no", "task", 1, "m2|0|0", CURATOR, None, evt=live)
    assert "m2|0|0" not in list(out[1]["key"])
    pick = out[2]
    assert "value" not in pick, f"the live reload moved the pick to {pick.get('value')}"
    assert [key for _, key in pick["choices"]][-1] == "m2|0|0" and "What is 10 minus 4" in pick["choices"][-1][0]
    assert load(RUN, IT, "", "no", "task", 1, None, CURATOR, None, evt=live)[2]["value"] == "m1|0|0"  # empty picker
    # A filter change (no live reload) still moves such a pick to the page's first item.
    assert load(RUN, IT, "", "no", "task", 1, "m2|0|0", CURATOR, None)[2]["value"] == "m1|0|0"
    # Pairs: a pair excluded off an "Excluded = no" page stays picked through a live reload.
    search = fns["pairs_search"].fn
    filters = ("", "", "", "any", "no", "any", "task", 1)
    search(RUN, IT, *filters, "m2|0|0", CURATOR, None)
    curation.exclude_pair(store, RUN, IT, "m2", 0, pair_idx=0, curator=CURATOR)
    store.set_stage(RUN, IT, "pairs", "done")
    kept = search(RUN, IT, *filters, "m2|0|0", CURATOR, None, evt=_live(fns, "pairs"))[2]
    assert "value" not in kept and "m2|0|0" in [key for _, key in kept["choices"]]


@pytest.mark.browser
def test_in_the_page_the_pairs_table_fills_once_the_pairs_stage_ends(tmp_path, monkeypatch):
    """In chromium: iteration 1 has plans (sample done) and no pairs; the Pairs tab says so. The pairs stage then
    writes its pairs and ends, straight in the store the served app holds: the table, the picker and the pair's view
    fill with no reload and no key press (the live check at 1 s)."""
    from studio import live_views
    from tests.test_studio_pairs_ux import _world_page

    monkeypatch.setattr(live_views, "pace", lambda ctx: 1.0)
    held: list[Store] = []

    def sampled(store: Store) -> None:
        held.append(store)
        for table in ("plans", "scores"):
            store.write(table, [{**r, "iteration": IT + 1} for r in store.frame(table, RUN, IT).to_dict("records")])
        for stage in ("sample", "score"):
            store.set_stage(RUN, IT + 1, stage, "running")
            store.set_stage(RUN, IT + 1, stage, "done")

    with _world_page(tmp_path, sampled) as (page, expect):
        store = held[0]
        expect(page.locator("#pick-iteration input")).to_have_value(str(IT + 1))
        page.get_by_role("tab", name="Pairs").click()
        info = page.locator("#pairs-info")
        expect(info).to_contain_text("0 rows")
        store.set_stage(RUN, IT + 1, "pairs", "running")
        store.write("pairs", [{**row, "iteration": IT + 1} for row in auto_pair_rows()])
        store.set_stage(RUN, IT + 1, "pairs", "done")
        expect(info).to_contain_text("3 rows", timeout=15_000)
        expect(page.locator("#pairs-pick input")).to_have_value(re.compile("plan 0 over 3 · m1"))
        expect(page.locator("#pairs-chosen")).to_contain_text("Multiply 3 by 4")
