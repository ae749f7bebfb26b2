"""Fixes from a browser audit of the Export and Plans tabs, on the hand-made world (``tests._store_world``):

* a refused export left the previous export's line and download under the error (a ``gr.Error`` changes no
  output): each click now clears both in the browser first, then exports;
* an SFT export said nothing of the original (warm-start) rows train_grounder mixes in (``sft.original_ratio``),
  which the file does not hold; the pairs-form radio stayed active for SFT, where it does not apply;
* the plans table overflowed a phone's screen with no way to scroll to its text (a ``.moat-scroll`` box now);
* an iteration whose sampling was stopped partway read like a whole iteration.
"""

from __future__ import annotations

import re

import gradio as gr
import pytest

from engine.store import Store
from tests._store_world import RUN, TASKS, studio_fns, world_store


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def fns(store):
    return studio_fns(store)


def _by_elem(outputs, values) -> dict[str, object]:
    return {o.elem_id: v for o, v in zip(outputs, values)}


def test_an_export_click_clears_the_last_line_and_file_before_it_exports(fns):
    """The page clears the message and the download in the browser, then exports: the page runs a click's
    listeners in the order registered, each done before the next starts. A refused export (here an unknown kind, as
    an API client might send) shows its error alone."""
    clear, export = fns["export_file_clear"], fns["export_file"]
    assert clear.fn is None and clear.js and clear._id < export._id  # registered first: it runs first
    assert clear.targets == export.targets and [event for _, event in clear.targets] == ["click"]  # the button's
    assert [o.elem_id for o in clear.outputs] == [o.elem_id for o in export.outputs] == ["export-message",
                                                                                          "export-file"]
    assert re.fullmatch(r"\(\) => \['', null\]", clear.js)  # one empty value per output, in that order
    # The export endpoint keeps its inputs and its (message, file) answer for API clients.
    message, path = export.fn(RUN, 0, "pairs", "jsonl", "text", None)
    assert message.startswith("Exported 3 pairs to") and path.endswith("world-run-it0-pairs.jsonl")
    with pytest.raises(gr.Error):
        export.fn(RUN, 0, "no-such-kind", "jsonl", "text", None)
    push_clear, push = fns["export_push_hub_clear"], fns["export_push_hub"]
    assert push_clear.fn is None and push_clear._id < push._id and push_clear.targets == push.targets
    assert [o.elem_id for o in push_clear.outputs] == ["export-message"] and push_clear.js == "() => ''"


def test_the_pairs_form_is_off_while_sft_is_picked(fns):
    kind = fns["export_kind"]
    assert [o.elem_id for o in kind.inputs] == ["export-kind"] and [o.elem_id for o in kind.outputs] == [
        "export-pairs-form"]
    assert kind.fn("sft")["interactive"] is False
    assert kind.fn("pairs")["interactive"] is True


def test_an_sft_export_says_the_replayed_original_rows_are_not_in_the_file(store, fns):
    from studio.tab_export import replay_note

    export = fns["export_file"]
    # Before train_grounder has run: what the config will mix in (the world's config is the defaults: ratio -1).
    message = export.fn(RUN, 0, "sft", "jsonl", "text", None)[0]
    assert "Not in the file: the original (warm-start) rows train_grounder will mix in" in message
    assert "sft.original_ratio = -1: all of them" in message
    assert "original" not in export.fn(RUN, 0, "pairs", "jsonl", "text", None)[0]  # pairs mix in nothing
    store.set_stage(RUN, 0, "train_grounder", "done", counts={"rows": 480, "new_rows": 96, "original_rows": 384})
    message = export.fn(RUN, 0, "sft", "jsonl", "text", None)[0]
    assert message.endswith(" Not in the file: the 384 original (warm-start) rows train_grounder mixed in beside "
                            "these records (sft.original_ratio).")
    # No new rows: the stage kept the grounder and mixed in nothing.
    store.set_stage(RUN, 0, "train_grounder", "done", counts={"note": "no accepted or corrected groundings"})
    assert replay_note(store, RUN, 0, "sft") == ""
    other = store.create_run("no-replay", {"sft": {"original_ratio": 0}}, "runs")
    assert replay_note(store, other, 1, "sft") == ""
    grpo = store.create_run("grpo", {"stages": {"grounder_objective": "grpo"}}, "runs")
    assert replay_note(store, grpo, 1, "sft") == ""
    half = store.create_run("half", {"sft": {"original_ratio": 0.5}}, "runs")
    assert "(sft.original_ratio = 0.5: 0.5 per new row)" in replay_note(store, half, 1, "sft")


def test_the_plans_table_scrolls_sideways_in_a_box_the_page_css_styles(store):
    from studio.app import TABLE_CSS
    from studio.tab_plans import plans_html

    html = plans_html(store, RUN, 0, "m1")
    assert re.fullmatch(r"<div class='moat-scroll'><table class='moat-plans'>.*</table></div>", html, re.S)
    assert "width:160px" not in html  # the bar's width is the CSS's, which a phone narrows
    assert html.count("class='moat-plans-text'") == html.count("class='moat-plans-bar'") == 4
    css = re.sub(r"\s+", " ", TABLE_CSS)
    assert ".moat-scroll { display: block; overflow-x: auto; max-width: 100%; }" in css
    assert re.search(r"@media \(max-width: 640px\) \{ \.moat-plans-bar \{ width: 60px; \} \}", css)


def _partial_iteration(store: Store, stage_status: str) -> None:
    """Iteration 1 of the world with m1 sampled only (of its 3 train tasks), the sample stage left ``stage_status``."""
    plans = store.task_plans(RUN, 0, "m1")
    store.write("plans", [{"run_id": RUN, "iteration": 1, "task_id": "m1", "step": 0, "k": int(r.k), "prompt": "p",
                           "text": r.text, "subgoals_json": [], "well_formed": True} for r in plans.itertuples()])
    store.set_stage(RUN, 1, "sample", "running")
    if stage_status != "running":
        store.set_stage(RUN, 1, "sample", stage_status, error="train_sample stopped at the user's request")


def test_a_stopped_sampling_is_called_partial_in_the_plans_view(store, fns):
    from studio.tab_plans import partial_sampling, plans_html

    assert partial_sampling(store, RUN, 0) == ""  # no sample stage record (the world's iteration 0): nothing to say
    _partial_iteration(store, "stopped")
    assert len(TASKS) == 3
    note = "Iteration 1 is partial: sampled 1 of 3 tasks; the sample stage was stopped"
    assert partial_sampling(store, RUN, 1).startswith(note)
    assert note in plans_html(store, RUN, 1, "m1") and note in plans_html(store, RUN, 1, "m2")  # m2: no plans
    info = fns["plans_search"].fn(RUN, 1, "", "", "", 1)[0]
    assert "1 with plans in iteration 1" in info and note in info
    store.set_stage(RUN, 1, "sample", "failed", error="boom")
    assert "the sample stage failed" in partial_sampling(store, RUN, 1)
    store.set_stage(RUN, 1, "sample", "running")
    assert "has not finished" in partial_sampling(store, RUN, 1)
    store.set_stage(RUN, 1, "sample", "done")
    assert partial_sampling(store, RUN, 1) == "" and "partial" not in plans_html(store, RUN, 1, "m1")
    # data.train_limit = 1: the one sampled task is all the iteration planned, stopped or not
    store.set_stage(RUN, 1, "sample", "stopped")
    limited = store.create_run("limited", {"data": {"train_limit": 1}}, "runs", TASKS)
    store.write("plans", [{"run_id": limited, "iteration": 1, "task_id": "m1", "step": 0, "k": 0, "prompt": "p",
                           "text": "Subgoal 1: x", "subgoals_json": [], "well_formed": True}])
    store.set_stage(limited, 1, "sample", "stopped")
    assert partial_sampling(store, limited, 1) == ""


def test_an_export_before_the_iteration_picker_fills_says_which_picker_is_empty(fns):
    """A click right after the page loads, before the iteration picker is filled, named both pickers ("Pick a run
    and an iteration first") though the run was picked: it names the empty one."""
    export = fns["export_file"]
    with pytest.raises(gr.Error, match=f"Pick an iteration of {RUN} first"):
        export.fn(RUN, None, "pairs", "jsonl", "text", None)
    with pytest.raises(gr.Error, match="Pick a run first"):
        export.fn(None, None, "pairs", "jsonl", "text", None)
