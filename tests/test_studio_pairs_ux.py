"""What a curator meets on the Pairs and Critic tabs, from a fresh-eyes review: *Choose these plans* starts from the
shown pair's own plans (and lists which texts repeat), the pair picker's label follows a swap / choose / undo, an
empty queue says why (iteration 0, filters that match nothing, an empty margin range, a page past the last), the
buttons that need a pick are off without one, the Critic status filter's "no filter" reads "any", the grounding
columns say "runs" and "correct" apart, the original -> correction diff is labelled and goes action by action, j/k
read the queue again, and the team's "reviewed N of M" follows the team while a curator only reads.

Handlers are called as the page's events call them (``build_app``'s functions by endpoint name) on the hand-made
store of ``tests/_store_world.py`` (no models); the one browser test checks what only the page shows (the read-only
tables' look and the status filter's label)."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest

from engine import curation, review_trail, verdict_curation
from engine.actions import parse_actions
from engine.store import Store
from tests._store_world import IT, RUN, build_world, studio_fns, world_store

CURATOR = "rita"
# min margin, max margin, text, overridden, excluded, ties, order
NO_FILTERS = ("", "", "", "any", "any", "any", "task")


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def fns(store):
    return studio_fns(store)


def _outputs(fns, name: str) -> list[str | None]:
    return [getattr(o, "elem_id", None) for o in fns[name].outputs]


def _by_id(fns, name: str, values) -> dict:
    """An event's return values by the elem_id of its outputs."""
    return {eid: v for eid, v in zip(_outputs(fns, name), values) if eid}


def _search(fns, it=IT, filters=NO_FILTERS, page=1, current=None, endpoint="pairs_search"):
    return fns[endpoint].fn(RUN, it, *filters, page, current, CURATOR, None)


def _applied(filters=NO_FILTERS) -> tuple:
    """The Pairs filters as the action reloads and the walk's refresh take them: the Search / Min / Max text as the
    last load applied it (one State, ``[min, max, text]``), then the radios and the order."""
    lo, hi, text, *rest = filters
    return ([lo, hi, text], *rest)


def _reload(fns, endpoint: str, filters=NO_FILTERS, current=None):
    return fns[endpoint].fn(RUN, IT, *_applied(filters), 1, current, CURATOR, None)


# -- 1. Choose these plans starts from the shown pair ----------------------------------------------------------------


def test_choose_starts_from_the_shown_pairs_plans_and_follows_every_pair_change(store, fns):
    """The two pickers were number boxes left at 0/0 (a press: "both are k=0") and kept the previous pair's numbers
    after `j`; now every shown pair fills them with its own chosen/rejected k, and no pair empties them."""
    detail = fns["pairs_detail"]
    m1 = _by_id(fns, "pairs_detail", detail.fn(RUN, IT, "m1|0|0"))
    assert m1["pairs-choose-chosen"]["value"] == 0 and m1["pairs-choose-rejected"]["value"] == 3
    labels = dict((k, label) for label, k in m1["pairs-choose-chosen"]["choices"])
    assert sorted(labels) == [0, 1, 2, 3] and m1["pairs-choose-rejected"]["choices"] == m1["pairs-choose-chosen"][
        "choices"]
    assert "same text as k=0" in labels[2] and "same text" not in labels[1] and "log-PPL 2.0000" in labels[3]
    m2 = _by_id(fns, "pairs_detail", detail.fn(RUN, IT, "m2|0|0"))  # the next pair (j): its own plans, not m1's
    assert (m2["pairs-choose-chosen"]["value"], m2["pairs-choose-rejected"]["value"]) == (0, 1)
    assert [k for _, k in m2["pairs-choose-chosen"]["choices"]] == [0, 1]
    none = _by_id(fns, "pairs_detail", detail.fn(RUN, IT, None))
    assert none["pairs-choose-chosen"]["value"] is None and none["pairs-choose-rejected"]["choices"] == []
    # In the browser, the pick's change empties both at once (no server call), before the detail refills them: a press
    # in between asks for the plans instead of pairing the new task's plans by the old pair's numbers.
    clear = fns["pairs_evidence_clear"]
    assert {"pairs-choose-chosen", "pairs-choose-rejected"} <= set(_outputs(fns, "pairs_evidence_clear"))
    assert clear.fn is None and "null, null" in clear.js
    with pytest.raises(Exception, match="Pick the chosen and the rejected plan"):
        fns["pairs_choose"].fn(RUN, IT, "m2|0|0", CURATOR, None, None, "", None)


def test_choose_with_the_prefilled_plans_after_a_swap_records_the_pair_as_shown(store, fns):
    """After a swap the detail refills the pickers with the swapped numbers: a press then keeps the pair as shown
    (a different-plan error was the old first press)."""
    assert "“Swap” recorded" in fns["pairs_swap"].fn(RUN, IT, "m2|0|0", CURATOR, None, None, "", None)
    after = _by_id(fns, "pairs_swap_detail", fns["pairs_swap_detail"].fn(RUN, IT, "m2|0|0"))
    c, r = after["pairs-choose-chosen"]["value"], after["pairs-choose-rejected"]["value"]
    assert (c, r) == (1, 0)
    assert "“Choose these plans” recorded" in fns["pairs_choose"].fn(RUN, IT, "m2|0|0", CURATOR, c, r, "", None)
    pair = store.effective_pairs(RUN, IT, task_id="m2").iloc[0]
    assert (int(pair["chosen_k"]), int(pair["rejected_k"])) == (1, 0)


# -- 2. the pair picker's label follows the overrides ----------------------------------------------------------------


def _label_of(update: dict, key: str) -> str:
    return next(label for label, k in update["choices"] if k == key)


@pytest.mark.parametrize("action", ["swap", "choose", "undo"])
def test_the_pair_pickers_label_follows_a_swap_a_choose_and_an_undo(store, fns, action):
    """The picker read "plan 0 over 3" while the panel showed chosen k=3 after a swap: each action's reload now sends
    the page's labels (choices only: the value stays the curator's)."""
    key = "m1|0|0"
    if action == "undo":
        curation.swap_pair(store, RUN, IT, "m1", 0, curator=CURATOR)
        fns["pairs_undo"].fn(RUN, IT, CURATOR, None)
        want = "plan 0 over 3"
    elif action == "swap":
        fns["pairs_swap"].fn(RUN, IT, key, CURATOR, None, None, "", None)
        want = "plan 3 over 0"
    else:
        fns["pairs_choose"].fn(RUN, IT, key, CURATOR, 1, 3, "", None)
        want = "plan 1 over 3"
    out = _by_id(fns, f"pairs_{action}_reload", _reload(fns, f"pairs_{action}_reload", current=key))
    picker = out["pairs-pick"]
    assert "value" not in picker  # a `j` pressed meanwhile keeps its pick
    assert want in _label_of(picker, key)


def test_a_pair_an_action_takes_off_the_filtered_page_keeps_its_fresh_label(store, fns):
    """With *Overridden = no*, a swapped pair leaves the page; the picker still names it (swapped), not by its key."""
    filters = ("", "", "", "no", "any", "any", "task")
    fns["pairs_swap"].fn(RUN, IT, "m1|0|0", CURATOR, None, None, "", None)
    picker = _by_id(fns, "pairs_swap_reload", _reload(fns, "pairs_swap_reload", filters, "m1|0|0"))["pairs-pick"]
    assert "plan 3 over 0" in _label_of(picker, "m1|0|0") and len(picker["choices"]) == 3


# -- 3. empty states and the buttons that need a pick ----------------------------------------------------------------


def test_iteration_0_says_pairs_and_verdicts_start_at_iteration_1(store, fns):
    store.write("runs", [{"run_id": "fresh", "name": "fresh", "config_json": {}, "run_dir": "runs/fresh"}])
    info = fns["pairs_search"].fn("fresh", 0, *NO_FILTERS, 1, None, CURATOR, None)[0]
    assert info.startswith("0 rows · ") and "pairs start at iteration 1" in info and "iteration 0" in info
    assert "0 of 0" not in info and "page" not in info
    info = fns["critic_queue"].fn("fresh", 0, "", "any", "task", 1, None, CURATOR, None)[0]
    assert "verdicts start at iteration 1" in info and "0 of 0" not in info
    assert "has no pairs yet" in fns["pairs_search"].fn("fresh", 1, *NO_FILTERS, 1, None, CURATOR, None)[0]
    info = fns["critic_queue"].fn("fresh", 1, "", "any", "task", 1, None, CURATOR, None)[0]
    assert "iteration 1 has no verdicts yet" in info


def test_a_run_without_a_critic_or_pairs_says_its_queue_stays_empty(store, fns):
    """A no-critic variant's critique stage is skipped: its queue says so and why, never "no verdicts yet"."""
    store.write("runs", [{"run_id": "raw", "name": "raw", "config_json": {}, "run_dir": "runs/raw"}])
    reason = "no critic (stages.grounder_data = raw): SFT on the grounder's own groundings, unchecked"
    store.set_stage("raw", 1, "critique", "skipped", counts={"note": reason})
    info = fns["critic_queue"].fn("raw", 1, "", "any", "task", 1, None, CURATOR, None)[0]
    assert f"iteration 1 writes no verdicts. Its critique stage was skipped: {reason}" in info, info
    assert "yet" not in info and "0 of 0" not in info
    # likewise a variant without stage 1 (no_stage1) has no pairs
    store.set_stage("raw", 1, "pairs", "skipped", counts={"note": "stage 1 disabled (stages.stage1 = false)"})
    info = fns["pairs_search"].fn("raw", 1, *NO_FILTERS, 1, None, CURATOR, None)[0]
    assert "iteration 1 writes no pairs. Its pairs stage was skipped: stage 1 disabled (stages.stage1 = false)" in info


def test_a_filter_that_matches_nothing_says_which_filters_are_set(store, fns):
    info = _search(fns, filters=("0.1", "", "zzz*q", "yes", "any", "no", "margin"))[0]
    assert re.match(r"0 rows · no pair matches these filters: ", info), info  # "N rows" first (test_studio_security)
    assert "search “zzz\\*q”" in info and "min margin 0.1" in info and "overridden = yes" in info
    assert "ties = no" in info and "excluded" not in info and "max margin" not in info
    info = fns["critic_queue"].fn(RUN, IT, "truncated", "no", "task", 1, None, CURATOR, None)[0]
    assert "no verdict matches these filters: critic status truncated, reviewed = no" in info
    info = fns["critic_queue"].fn(RUN, IT, "", "overruled", "task", 1, None, CURATOR, None)[0]
    assert "reviewed = overruled the critic" in info


def test_the_buttons_that_need_a_pick_are_off_without_one(store, fns):
    """They said "Pick a pair first." on a press; now the detail event (no extra round trip) switches them."""
    pair_buttons = ["pairs-swap", "pairs-exclude", "pairs-tie", "pairs-restore", "pairs-reviewed", "pairs-choose",
                    "pairs-evidence"]
    off = _by_id(fns, "pairs_detail", fns["pairs_detail"].fn(RUN, IT, None))
    on = _by_id(fns, "pairs_detail", fns["pairs_detail"].fn(RUN, IT, "m1|0|0"))
    assert [off[b]["interactive"] for b in pair_buttons] == [False] * 7
    assert [on[b]["interactive"] for b in pair_buttons] == [True] * 7
    assert "pairs-undo" not in off  # undo needs no pick
    verdict_buttons = ["critic-keep_original", "critic-drop", "critic-restore", "critic-reviewed", "critic-preview",
                       "critic-save"]
    off = _by_id(fns, "critic_detail", fns["critic_detail"].fn(RUN, IT, None))
    on = _by_id(fns, "critic_detail", fns["critic_detail"].fn(RUN, IT, "m1|0|0"))
    assert [off[b]["interactive"] for b in verdict_buttons] == [False] * 6
    assert [on[b]["interactive"] for b in verdict_buttons] == [True] * 6
    assert on["critic-accept_correction"]["interactive"] is False  # m1 was accepted: nothing to accept


def test_a_read_only_studio_keeps_the_write_buttons_off_with_a_pick(store):
    from studio.app import build_app

    demo = build_app(store, "examples/demo.toml", read_only=True)
    detail = next(f for f in demo.fns.values() if f.api_name == "pairs_detail")
    out = {o.elem_id: v for o, v in zip(detail.outputs, detail.fn(RUN, IT, "m1|0|0")) if o.elem_id}
    assert out["pairs-swap"]["interactive"] is False and out["pairs-choose"]["interactive"] is False


# -- 4. paging and the margin range ----------------------------------------------------------------------------------


def test_a_page_past_the_last_shows_the_last_page_and_says_so(store, fns):
    """Page 99 showed "0 rows · page 1 of 1", which read as "no pairs"."""
    info, rows, *_, page = _search(fns, page=99)
    assert info.startswith("3 rows · page 1 of 1 (page 99 is past the last page)") and len(rows) == 3
    assert page == 1  # the page box is put on the page shown
    assert _search(fns, page=1)[-1] == {"__type__": "update"}  # within range: the box is left alone
    critic = fns["critic_queue"].fn(RUN, IT, "", "any", "task", 99, None, CURATOR, None)
    assert critic[0].startswith("3 rows · page 1 of 1 (page 99 is past the last page)") and critic[-1][0] == 1
    # The Critic's page box follows through a State (its endpoint keeps the four outputs a client unpacks).
    assert fns["critic_page_clamp"].fn(critic[-1]) == 1
    assert fns["critic_queue"].fn(RUN, IT, "", "any", "task", 1, None, CURATOR, None)[-1] == {"__type__": "update"}


def test_clamped_page_goes_to_the_last_page_of_many():
    from studio.picks import clamped_page
    from studio.queue_lines import queue_info

    rows = list(range(70))

    def fetch(page: int, size: int = 20):
        part = rows[(page - 1) * size: page * size]
        return part, (len(rows) if part else 0)

    assert clamped_page(fetch, 99, 20) == (rows[60:], 70, 4)
    assert clamped_page(fetch, 2, 20) == (rows[20:40], 70, 2)
    assert clamped_page(lambda p: ([], 0), 5, 20) == ([], 0, 1)
    assert queue_info(70, 99, 4, 20) == "70 rows · page 4 of 4 (page 99 is past the last page)"


def test_an_empty_margin_range_says_so(store, fns):
    info = _search(fns, filters=("0.8", "0.5", "", "any", "any", "any", "task"))[0]
    assert "0 rows · the margin range is empty: min margin 0.8 is above max margin 0.5" in info


# -- 5. the Critic table ---------------------------------------------------------------------------------------------


def test_the_critic_status_filter_labels_no_filter_any(store, fns):
    from studio.tab_critic import STATUSES

    assert STATUSES[0] == ("any", "")
    status = next(i for i in fns["critic_queue"].inputs if getattr(i, "elem_id", None) == "critic-status")
    assert status.choices[0] == ("any", "") and status.value == ""


def test_the_grounding_columns_say_runs_and_correct_apart(store):
    """One "grounding_ok" column (clipped to "groundin…") read "true" on m2, whose actions run but answer wrongly."""
    from studio.tab_critic import COLUMNS, WIDTHS, verdict_table

    df, _ = verdict_table(store, RUN, IT)
    assert "grounding_ok" not in COLUMNS and len(WIDTHS) == len(COLUMNS)
    got = {k.split("|")[0]: (r, c) for k, r, c in zip(df["key"], df["runs"], df["correct"])}
    assert got == {"m1": ("yes", "yes"), "m2": ("yes", "no"), "q1": ("no", "no")}


def test_the_critic_tables_never_look_editable(store, fns):
    """Both queue tables are read-only (a click picks the row); Gradio's frame and select handles on the clicked cell
    looked like an edit box, so the page hides them (the browser test sees it)."""
    from gradio.components import HTML, Dataframe

    from studio.app import build_app

    demo = build_app(store, "examples/demo.toml")
    blocks = list(demo.blocks.values())
    for table_id in ("critic-table", "pairs-table"):
        table = next(b for b in blocks if getattr(b, "elem_id", None) == table_id)
        assert isinstance(table, Dataframe) and table.interactive is False
        assert any(isinstance(b, HTML) and f"#{table_id} .selection-button" in str(b.value) for b in blocks)


# -- 6. the original -> correction diff ------------------------------------------------------------------------------


def test_the_correction_diff_is_labelled_and_goes_action_by_action(store):
    """The diff had no label and split at blanks: "Calculator(9 Calculator(R1 + R1); 3)" read as garbage."""
    from studio.render import action_diff_html
    from studio.tab_critic import verdict_view

    diff = verdict_view(store, RUN, IT, "m2|0|0")[2]
    assert "Grounded actions → corrected actions" in diff
    original = "R1 = Calculator(9 - 2); R2 = Calculator(R1 + R1); R3 = Calculator(R2 / 3)"
    corrected = "R1 = Calculator(9 * 3); R2 = Calculator(R1 + 2); R3 = Calculator(R2 / 3); R4 = Calculator(R3 - 1)"
    html = action_diff_html(original, corrected)
    changed = re.findall(r"<(del|ins)[^>]*>(.*?)</\1>", html)
    assert [(tag, text) for tag, text in changed] == [  # each replaced action next to its replacement
        ("del", "R1 = Calculator(9 - 2)"), ("ins", "R1 = Calculator(9 * 3)"),
        ("del", "R2 = Calculator(R1 + R1)"), ("ins", "R2 = Calculator(R1 + 2)"), ("ins", "R4 = Calculator(R3 - 1)")]
    assert all(len(parse_actions(text).actions) == 1 for _, text in changed)  # each a whole action
    assert "R3 = Calculator(R2 / 3)" in re.sub(r"<(del|ins)[^>]*>.*?</\1>", "", html)  # kept as it is
    assert action_diff_html("", "R1 = f(a; b)").count("<ins") == 1  # a ";" inside brackets does not split


# -- the page itself -------------------------------------------------------------------------------------------------


@pytest.mark.browser
@contextmanager
def _world_page(tmp_path, *extra):
    """A Chromium page (1400x1000) on the hand-made world served in this process (``extra``: functions that add to the
    store first), closed with its browser and server."""
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        for add in extra:
            add(store)
        url, demo = serve_studio(store)
        try:
            sync_api.expect.set_options(timeout=30_000)
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(30_000)
                page.goto(url)
                try:
                    yield page, sync_api.expect
                finally:
                    browser.close()
        finally:
            demo.close()


def test_in_the_page_choose_follows_the_pair_and_a_critic_click_shows_no_edit_box(tmp_path):
    """In chromium. Pairs: the Choose pickers show the pair's own plans (a js-only listener registered after the
    detail ran once the detail had answered and emptied them), follow `j`, and a swap turns the picker's label and
    both pickers. Critic: clicking a cell picks its verdict with no text box and no select handles (the cell frame is
    gone too), the status filter reads "any" and the diff is labelled."""
    with _world_page(tmp_path) as (page, expect):
        name = page.locator("#curator-name textarea, #curator-name input").first
        name.fill(CURATOR)
        name.press("Enter")
        expect(page.locator("#curator-who")).to_contain_text(CURATOR)
        page.get_by_role("tab", name="Pairs").click()
        pick = page.locator("#pairs-pick input")
        chosen = page.locator("#pairs-choose-chosen input")
        rejected = page.locator("#pairs-choose-rejected input")
        expect(pick).to_have_value(re.compile("plan 0 over 3 · m1"))
        expect(chosen).to_have_value("k=0 · log-PPL 0.5000")
        expect(rejected).to_have_value("k=3 · log-PPL 2.0000")
        page.locator("#pairs-swap").click()
        expect(pick).to_have_value(re.compile("plan 3 over 0 · m1"))
        expect(chosen).to_have_value("k=3 · log-PPL 2.0000")
        page.locator("body").press("j")
        expect(pick).to_have_value(re.compile("plan 0 over 1 · m2"))
        expect(chosen).to_have_value("k=0 · log-PPL 0.8000")
        expect(rejected).to_have_value("k=1 · log-PPL 1.1000")

        page.get_by_role("tab", name="Critic").click()
        expect(page.locator("#critic-info")).to_contain_text("3 rows")
        expect(page.locator("#critic-status input")).to_have_value("any")
        cell = page.locator("#critic-table [data-testid='cell-1-2']")
        expect(cell).to_have_text("corrected")
        cell.click()
        expect(page.locator("#critic-pick input")).to_have_value(re.compile("corrected"))
        cell.dblclick()
        page.keyboard.press("Enter")
        assert page.locator("#critic-table textarea").count() == 0
        assert page.locator("#critic-table .selection-button").count() >= 1  # Gradio draws them ...
        assert not page.locator("#critic-table .selection-button").first.is_visible()  # ... hidden
        framed = cell.evaluate("e => [e, ...e.querySelectorAll('*')].map(x => getComputedStyle(x).boxShadow)")
        assert set(framed) == {"none"}, framed  # the cell and its text had an orange frame
        expect(page.locator("#critic-diff")).to_contain_text("action by action")


# -- 7. the same key in another iteration is drawn anew --------------------------------------------------------------


def _second_iteration(store: Store) -> None:
    """Iteration IT + 1 with the same tasks, keys and verdict keys as IT, and other plan texts and actions."""
    for table in ("plans", "scores", "pairs", "groundings", "verdicts"):
        rows = store.frame(table, RUN, IT).to_dict("records")
        for row in rows:
            row["iteration"] = IT + 1
            if table == "plans":
                row["text"] = "NEXT ITERATION " + row["text"]
            if table == "groundings":
                row["actions"] = "R1 = Calculator(99*99)"
        store.write(table, rows)


@pytest.mark.parametrize("tab", ["pairs", "critic"])
def test_switching_iteration_redraws_a_picked_key_the_new_iteration_also_has(store, fns, tab):
    """task|step|pair_idx (and task|step|k) recur in every iteration, so a switch left the picker's value as it was:
    no pick change fired, and the view kept the previous iteration's plans (or verdict) while the buttons acted on the
    new one's. The queue's reload now redraws the view when what is shown is not what is picked."""
    _second_iteration(store)
    key = "m1|0|0"
    detail, redraw = fns[f"{tab}_detail"], fns[f"{tab}_detail_redraw"]
    first = detail.fn(RUN, IT, key)
    drawn = first[-1]
    assert drawn == [RUN, IT, key]
    import gradio as gr

    assert redraw.fn(RUN, IT, key, drawn) == (gr.skip(),) * len(redraw.outputs)  # shown is picked: nothing sent
    again = redraw.fn(RUN, IT + 1, key, drawn)  # the iteration picker moved; the key stayed
    assert again[-1] == [RUN, IT + 1, key]
    text = " ".join(str(v) for v in again if isinstance(v, str))
    marker = "NEXT ITERATION" if tab == "pairs" else "99*99"
    assert marker in text and marker not in " ".join(str(v) for v in first if isinstance(v, str))
    # wired after the queue's reload, which is what runs on an iteration or run switch
    search = fns[f"{tab}_search" if tab == "pairs" else "critic_queue"]
    assert redraw.trigger_after == search._id


def test_in_the_page_an_iteration_switch_redraws_the_picked_pair(tmp_path):
    """In chromium: the pair picked on iteration 1 also exists on iteration 0; after the switch the view shows
    iteration 0's plans (it kept iteration 1's)."""
    with _world_page(tmp_path, _second_iteration) as (page, expect):
        iteration = page.locator("#pick-iteration input")
        expect(iteration).to_have_value(str(IT + 1))
        page.get_by_role("tab", name="Pairs").click()
        expect(page.locator("#pairs-pick input")).to_have_value(re.compile("m1"))
        expect(page.locator("#pairs-chosen")).to_contain_text("NEXT ITERATION")
        iteration.click()
        page.get_by_role("option", name=str(IT), exact=True).click()
        expect(iteration).to_have_value(str(IT))
        expect(page.locator("#pairs-pick input")).to_have_value(re.compile("m1"))
        expect(page.locator("#pairs-chosen")).not_to_contain_text("NEXT ITERATION")


# -- 8. a new order starts at its head -------------------------------------------------------------------------------


@pytest.mark.parametrize(("tab", "endpoint", "values"), [
    ("pairs", "pairs_search", [RUN, IT, "", "", "", "any", "any", "any", "-margin", 1]),
    ("critic", "critic_queue", [RUN, IT, "", "any", "disagreement", 1]),
])
def test_a_new_order_starts_at_its_head(fns, tab, endpoint, values):
    """The pick stayed where it was after the order changed, often last in the new order, where `j` silently did
    nothing. An order change (and only that: a reload keeps a pick that is on the page) now picks the new order's
    first item, on page 1."""
    import gradio as gr

    search = fns[endpoint]
    order = next(c for c in search.inputs if getattr(c, "elem_id", None) == f"{tab}-order")
    assert search.inputs.index(order) == len(values) - 2  # the order is the value before the page
    pick_at = [getattr(o, "elem_id", None) for o in search.outputs].index(f"{tab}-pick")
    keys = search.fn(*values, None, CURATOR, None)[1]["key"].tolist()
    assert len(keys) >= 2
    kept = search.fn(*values, keys[-1], CURATOR, None)  # a reload: the pick is on the page, so it stays
    assert "value" not in kept[pick_at]
    moved = search.fn(*values, keys[-1], CURATOR, None, gr.EventData(order, None))  # the order's own change
    assert moved[pick_at]["value"] == keys[0] and moved[-1] not in (None, {}) and not isinstance(moved[-1], dict)


def test_in_the_page_a_new_order_picks_its_head(tmp_path):
    """In chromium: on the third pair, "largest margin first" moves the pick to that order's first pair (the served
    app's event names a copy of the order component, so the handler matches it by elem_id)."""
    with _world_page(tmp_path) as (page, expect):
        page.get_by_role("tab", name="Pairs").click()
        pick = page.locator("#pairs-pick input")
        expect(pick).to_have_value(re.compile("m1"))
        page.locator("body").press("j")
        expect(pick).to_have_value(re.compile("m2"))
        page.locator("body").press("j")
        expect(pick).to_have_value(re.compile("q1"))
        page.locator("#pairs-order input").click()
        page.get_by_role("option", name="largest margin first").click()
        expect(pick).to_have_value(re.compile("plan 0 over 3 · m1"))  # margin 1.5, the largest


def test_a_plans_page_past_the_last_shows_the_last_page_and_says_so(store, fns):
    """The Plans tab's task list had no clamp: page 99 read "0 rows", as if the run had no task."""
    tasks = store.count("tasks", RUN)
    info, table, _ = fns["plans_search"].fn(RUN, IT, "", "", "", 99)
    pages = -(-tasks // 20)
    assert info.startswith(f"{tasks} rows · page {pages} of {pages} (page 99 is past the last page)"), info
    assert len(table) == tasks - 20 * (pages - 1)


# -- 9. j/k read the queue again -------------------------------------------------------------------------------------

# A tab's queue read (run, iteration, filters, page) as its load takes it, as its walk's refresh takes it, and a
# decision another curator makes on its second item.
LOAD = {"pairs": (RUN, IT, *NO_FILTERS, 1), "critic": (RUN, IT, "", "any", "task", 1)}
QUEUE = {"pairs": (RUN, IT, *_applied(), 1), "critic": LOAD["critic"]}
BOB_DECIDES = {"pairs": ("swap", lambda store: curation.swap_pair(store, RUN, IT, "m2", 0, curator="bob")),
               "critic": ("keep_original",
                          lambda store: verdict_curation.keep_original(store, RUN, IT, "m2", 0, 0, curator="bob"))}


@pytest.mark.parametrize("tab", ["pairs", "critic"])
def test_j_and_k_read_the_queue_again_so_another_curators_decision_shows(store, fns, tab):
    """The table and the team's "reviewed N of M" were read on a filter, a page change or an action, never on j/k:
    what another curator decided meanwhile showed only later. Each move is now followed by the tab's own queue read
    (the table and its line; not the charts or the agreement: a key press stays cheap), which moves no pick."""
    import gradio as gr

    search = fns["pairs_search" if tab == "pairs" else "critic_queue"]
    df = search.fn(*LOAD[tab], None, CURATOR, None)[1]
    keys = df["key"].tolist()
    move, refresh = fns[f"{tab}_next"], fns[f"{tab}_next_reload"]
    picked, _, walked_to = move.fn(RUN, IT, keys[0], df, 1, len(keys), CURATOR, None)
    assert picked == walked_to.key == keys[1] == "m2|0|0"
    action, decide = BOB_DECIDES[tab]
    decide(store)  # meanwhile, in another browser
    assert refresh.trigger_after == move._id and fns[f"{tab}_prev_reload"].trigger_after == fns[f"{tab}_prev"]._id
    out = _by_id(fns, f"{tab}_next_reload", refresh.fn(*QUEUE[tab], walked_to, CURATOR, None))
    assert "reviewed 1 of 3 by the team, 0 by you" in out[f"{tab}-info"]
    row = out[f"{tab}-table"].set_index("key").loc["m2|0|0"]
    assert (row["override_action"], row["curator"]) == (action, "bob")
    assert "value" not in out[f"{tab}-pick"]  # the pick stays where j took it (and a later j's pick stays too)
    if tab == "pairs":  # the swap renamed the pair ("plan 1 over 0"): the new choices say so
        assert "plan 1 over 0" in _label_of(out["pairs-pick"], "m2|0|0")
    else:  # a verdict's label names the critic's status, which bob's decision leaves: the choices are not re-sent
        assert out["critic-pick"] == gr.skip()
    assert not any(isinstance(o, gr.Plot) for o in refresh.outputs) and "critic-agreement" not in out
    # A move to another page reads nothing more: that page's own change loads the queue.
    beyond = move.fn(RUN, IT, keys[-1], df, 1, 21, CURATOR, None)
    assert beyond[1:] == (2, None)
    assert refresh.fn(*QUEUE[tab], None, CURATOR, None) == (gr.skip(),) * len(refresh.outputs)


SEARCH = {"pairs": "pairs_search", "critic": "critic_queue"}


class _Session:
    """One browser session of the studio at handler level: the values its page and its session state hold, by
    component. An event's inputs are read from here and its outputs written back, as Gradio does; an update without a
    value (``gr.skip()``) leaves the value as it was. Starts on ``RUN``/``IT`` with ``CURATOR``'s name."""

    def __init__(self, fns: dict) -> None:
        self.fns = fns
        self.values: dict[int, object] = {}
        run, iteration, *_, curator = fns["pairs_search"].inputs
        self.set(run, RUN), self.set(iteration, IT), self.set(curator, CURATOR)

    def set(self, component, value) -> None:
        self.values[component._id] = value

    def get(self, component):
        import gradio as gr

        value = self.values.get(component._id, getattr(component, "value", None))
        return "" if value is None and isinstance(component, gr.Textbox) else value  # as the browser sends it

    def component(self, endpoint: str, label: str):
        """An input of ``endpoint`` by its label (the Search box, the Reviewed radio...)."""
        return next(c for c in self.fns[endpoint].inputs if getattr(c, "label", None) == label)

    def type(self, endpoint: str, label: str, value) -> None:
        """Type (or click) ``value`` into the input ``label`` of ``endpoint``, firing nothing."""
        self.set(self.component(endpoint, label), value)

    def call(self, endpoint: str) -> dict:
        """Run ``endpoint`` on this session's values (no gr.Request: one session); its outputs by elem_id."""
        fn = self.fns[endpoint]
        out = fn.fn(*(self.get(c) for c in fn.inputs), None)
        out = out if isinstance(out, tuple) else (out,)
        for component, value in zip(fn.outputs, out):
            if not (isinstance(value, dict) and value.get("__type__") == "update"):
                self.set(component, value)
            elif "value" in value:
                self.set(component, value["value"])
        return {getattr(c, "elem_id", None) or c._id: v for c, v in zip(fn.outputs, out)}

    def shown(self, endpoint: str, elem_id: str):
        """What the page shows in the output ``elem_id`` of ``endpoint``."""
        return self.get(next(c for c in self.fns[endpoint].outputs if getattr(c, "elem_id", None) == elem_id))


def _newer_read(fns, tab: str, what: str) -> None:
    """A read of the queue that starts after a walk's move, in the same session: the load of the page a second `j`
    crossed to (the move, then the page box's change), a filter's load, or an action and its reload."""
    if what == "second j to page 2":
        df = fns[SEARCH[tab]].fn(*LOAD[tab], None, CURATOR, None)[1]
        assert fns[f"{tab}_next"].fn(RUN, IT, df["key"].iloc[-1], df, 1, 21, CURATOR, None)[1] == 2
        fns[SEARCH[tab]].fn(*LOAD[tab][:-1], 2, None, CURATOR, None)
    elif what == "a filter's load":
        fns[SEARCH[tab]].fn(*LOAD[tab], None, CURATOR, None)
    elif tab == "pairs":
        fns["pairs_swap"].fn(RUN, IT, "m2|0|0", CURATOR, None, None, "", None)
        fns["pairs_swap_reload"].fn(*QUEUE[tab], "m2|0|0", CURATOR, None)
    else:
        fns["critic_keep_original"].fn(RUN, IT, "m2|0|0", CURATOR, "", None)
        fns["critic_keep_original_reload"].fn(*QUEUE[tab], "m2|0|0", CURATOR, None)


# The store read behind each tab's page of the queue.
STORE_READ = {"pairs": "pairs_page", "critic": "verdict_queue"}


def _newer_read_after(monkeypatch, owner, name: str, fns, tab: str, newer: str) -> list[str]:
    """Patch ``owner.name`` so that, the first time it is called, the ``newer`` read of the queue runs after it has
    read and before its caller answers; the list returned names that read once it has run."""
    read = getattr(owner, name)
    started: list[str] = []

    def then_the_newer_read(*args, **kwargs):
        value = read(*args, **kwargs)
        if not started:
            started.append(newer)
            _newer_read(fns, tab, newer)
        return value

    monkeypatch.setattr(owner, name, then_the_newer_read)
    return started


@pytest.mark.parametrize("tab", ["pairs", "critic"])
@pytest.mark.parametrize("newer", ["second j to page 2", "a filter's load", "an action and its reload"])
def test_a_walks_refresh_never_paints_over_a_newer_read_of_the_queue(store, fns, monkeypatch, tab, newer):
    """The refresh after `j` is an event of its own beside the tab's load and the action reloads, and a session's
    events overlap: one that had read the queue before a newer read started, and answered after it, painted the older
    page over the newer (the page box on 2 under page 1's table and choices; after a swap, the pair as it was before
    the swap). It now sends nothing when another read of the queue (a load, an action's reload) or another move has
    started since its move (``studio.queue_sessions``)."""
    import gradio as gr

    session = _Session(fns)
    session.call(SEARCH[tab])
    session.call(f"{tab}_next")
    started = _newer_read_after(monkeypatch, store, STORE_READ[tab], fns, tab, newer)  # the refresh's read
    out = session.call(f"{tab}_next_reload")
    assert started and list(out.values()) == [gr.skip()] * len(out)
    monkeypatch.undo()
    review_trail.mark_reviewed(store, RUN, IT, "pair" if tab == "pairs" else "verdict", "q1", 0, 0, curator="bob")
    session.call(f"{tab}_next")  # the next key press's refresh paints again
    assert "by the team" in session.call(f"{tab}_next_reload")[f"{tab}-info"]


def test_j_applies_no_search_text_that_was_typed_but_never_submitted(store, fns):
    """The Pairs tab's Search / Min / Max boxes filter on Enter only (and are remembered only then), but the walk's
    refresh read the boxes as they stood: text typed and not submitted emptied the table at the next `j`, and an
    action's reload did the same. Both now read the filters the last load applied."""
    session = _Session(fns)
    session.call("pairs_search")
    assert len(session.shown("pairs_search", "pairs-table")) == 3
    session.type("pairs_search", "Search", "zzz")  # typed, no Enter
    session.type("pairs_search", "Min margin", "9")
    session.call("pairs_next")
    session.call("pairs_next_reload")
    assert len(session.shown("pairs_search", "pairs-table")) == 3
    session.call("pairs_reviewed")
    out = session.call("pairs_reviewed_reload")
    assert len(out["pairs-table"]) == 3 and "reviewed 1 of 3 by the team" in out["pairs-info"]
    session.call("pairs_search")  # Enter: now the text applies
    assert len(session.shown("pairs_search", "pairs-table")) == 0


@pytest.mark.parametrize("tab", ["pairs", "critic"])
def test_j_sends_only_the_parts_of_the_queue_that_changed(store, fns, tab):
    """The refresh after each `j` re-sent the table, its line and the picker's choices unchanged: a table sent again
    is drawn again, and on the Pairs tab its change computed the whole run's curation summary. Now the parts the page
    already shows are skipped, whoever drew them (the load, an action's reload, the previous refresh)."""
    import gradio as gr

    session = _Session(fns)
    session.call(SEARCH[tab])
    session.call(f"{tab}_next")
    out = session.call(f"{tab}_next_reload")
    assert list(out.values()) == [gr.skip()] * len(out)  # nothing changed since the load
    session.call(f"{tab}_prev")
    session.call(f"{tab}_reviewed")  # y on the first item, then j: the reload drew the reviewed row already
    session.call(f"{tab}_reviewed_reload")
    session.call(f"{tab}_next")
    assert session.call(f"{tab}_next_reload")[f"{tab}-table"] == gr.skip()
    BOB_DECIDES[tab][1](store)  # meanwhile, in another browser: the second item
    session.call(f"{tab}_prev")
    out = session.call(f"{tab}_prev_reload")
    assert "bob" in set(out[f"{tab}-table"]["curator"]) and "reviewed 2 of 3 by the team" in out[f"{tab}-info"]
    session.call(f"{tab}_next")
    out = session.call(f"{tab}_next_reload")  # the other key's refresh drew it: not again
    assert out[f"{tab}-table"] == gr.skip() and out[f"{tab}-info"] == gr.skip()


def test_a_row_count_an_action_reload_did_not_send_is_sent_by_the_next_j(store, fns):
    """An action's reload sends no row count (the walk reads it to cross pages); a swap on a *Overridden = no* queue
    takes a pair off it. The refresh after the next `j` sends the new count: a reload records only what it sent."""
    session = _Session(fns)
    row_count = fns["pairs_next"].inputs[5]  # what j/k read to cross pages
    session.type("pairs_search", "Overridden", "no")
    session.call("pairs_search")
    session.call("pairs_swap")
    assert session.call("pairs_swap_reload")["pairs-info"].startswith("2 rows") and session.get(row_count) == 3
    session.call("pairs_next")
    session.call("pairs_next_reload")
    assert session.get(row_count) == 2


def test_the_critic_pickers_label_stays_when_the_verdict_j_moved_to_leaves_the_page(store, fns):
    """On a *Reviewed = no* queue, another curator's decision takes a verdict off it: the refresh after `j` to that
    verdict sent the new page's table but kept the old choices, so the picker's labels no longer matched the table.
    It now sends the page's labels and the verdict's own, as the Pairs tab does, and never moves the pick."""
    session = _Session(fns)
    session.type("critic_queue", "Reviewed", "no")
    session.call("critic_queue")
    session.call("critic_next")
    BOB_DECIDES["critic"][1](store)  # bob decides the verdict j went to: it is reviewed now
    out = session.call("critic_next_reload")
    assert out["critic-table"]["key"].tolist() == ["m1|0|0", "q1|0|0"] and "value" not in out["critic-pick"]
    labels = dict((key, label) for label, key in out["critic-pick"]["choices"])
    assert list(labels) == ["m1|0|0", "q1|0|0", "m2|0|0"]
    assert labels["m2|0|0"].endswith(" · plan 0 · accepted · m2") or " · plan 0 · " in labels["m2|0|0"]
    assert session.shown("critic_queue", "critic-pick") == "m2|0|0"


def test_the_walks_session_record_is_bounded_and_a_forgotten_session_never_paints_stale():
    """``QueueSessions`` keeps a generation and four digests per browser session, on the server: at most ``limit``
    sessions, the least recently used forgotten first. A forgotten session's walk in flight is skipped (its new
    generation is not the one its move kept), and its next refresh sends every part once."""
    from types import SimpleNamespace

    import gradio as gr
    import pandas as pd

    from studio.queue_sessions import QueueRead, QueueSessions, WalkedTo

    sessions = QueueSessions(limit=2)
    ann, bob, cy = (SimpleNamespace(session_hash=h) for h in ("ann", "bob", "cy"))
    queue = QueueRead("3 rows", pd.DataFrame({"key": ["a|0|0"]}), [("a", "a|0|0")], 3, gr.update())
    ann_walk = WalkedTo("a|0|0", sessions.begin(ann))
    sessions.begin(bob), sessions.begin(cy)  # a third session: ann's, the least recently used, is forgotten
    assert list(sessions._sessions) == ["bob", "cy"]
    assert sessions.after_walk(ann, ann_walk, lambda key: queue) == (gr.skip(),) * 5
    out = sessions.after_walk(ann, WalkedTo("a|0|0", sessions.begin(ann)), lambda key: queue)
    assert out[0] == "3 rows" and out[2] == gr.update(choices=[("a", "a|0|0")]) and out[3] == 3
    assert len(sessions._sessions) == 2


def test_in_the_page_j_shows_what_another_curator_decided_meanwhile(tmp_path):
    """In chromium: another curator swaps a pair and keeps a verdict while this one reads; the next `j` shows both in
    the table (their name in the curator column) and in the "reviewed" count, and the pick is the one `j` moved to."""
    held: list[Store] = []
    with _world_page(tmp_path, held.append) as (page, expect):
        store = held[0]
        for tab in ("pairs", "critic"):
            page.get_by_role("tab", name=tab.capitalize()).click()
            pick = page.locator(f"#{tab}-pick input")
            expect(pick).to_have_value(re.compile("m1"))
            expect(page.locator(f"#{tab}-info")).to_contain_text("reviewed 0 of 3 by the team")
            expect(page.locator(f"#{tab}-table")).not_to_contain_text("bob")
            if tab == "pairs":  # on the third item: the one j moves to is not the one that changed
                curation.swap_pair(store, RUN, IT, "q1", 0, curator="bob")
            else:
                verdict_curation.keep_original(store, RUN, IT, "q1", 0, 0, curator="bob")
            page.locator("body").press("j")
            expect(pick).to_have_value(re.compile("m2"))
            expect(page.locator(f"#{tab}-info")).to_contain_text("reviewed 1 of 3 by the team", timeout=10_000)
            expect(page.locator(f"#{tab}-table")).to_contain_text("bob")
            expect(pick).to_have_value(re.compile("m2"))


# -- 10. an iterative run's rows show their step ---------------------------------------------------------------------


def test_in_the_page_an_iterative_runs_rows_show_their_step_and_a_sorted_row_click_picks_its_pair(tmp_path):
    """In chromium, on an iterative iteration (a pair per task-step): the step column tells a task's steps apart, and
    after the table is sorted by it in the browser (Gradio sorts the rows it shows, not the server's page) a row
    click still picks that row's pair."""
    from tests._studio import add_iterative_iteration

    with _world_page(tmp_path, add_iterative_iteration) as (page, expect):
        expect(page.locator("#pick-iteration input")).to_have_value(str(IT + 1))
        page.get_by_role("tab", name="Pairs").click()
        pick, table = page.locator("#pairs-pick input"), page.locator("#pairs-table")
        expect(pick).to_have_value(re.compile(r"· step 1 · plan 0 over 1 · m1$"))
        step = table.locator("th").nth(1)
        expect(step).to_contain_text("step")
        # rows m1|1|0, m1|2|0, m2|1|0, m2|2|0: a cell's data-testid keeps the row's place in the page as sent
        expect(table.locator("[data-testid='cell-1-1']")).to_have_text(re.compile(r"^\s*2\s*$"))
        step.hover()
        step.get_by_role("button", name="Open cell menu").click()
        page.get_by_role("menuitem", name="Sort descending").click()
        expect(table.locator("tbody tr").first).to_contain_text("|2|0")  # step 2 first
        table.locator("[data-testid='cell-3-8']").click()  # m2's step 2, by its question's cell
        expect(pick).to_have_value(re.compile(r"· step 2 · plan 1 over 0 · m2$"))
        expect(page.locator("#pairs-chosen")).to_contain_text("m2 second step, plan b")


# -- 11. the team's counters follow the team between keys ------------------------------------------------------------


@pytest.mark.parametrize("tab", ["pairs", "critic"])
def test_the_team_counters_follow_another_curators_decision_without_a_key_press(store, fns, tab):
    """The team's "reviewed N of M" was read again only when this curator pressed a key or acted: one who only read
    never saw a teammate's progress. The counters' timer (``studio.team_counters``) reads the counts again and
    rewrites the counter inside the line the page shows, and nothing else; it sends nothing while the counts are
    unchanged, and what it drew is not sent again by the next key press (the table still is: it is the key's)."""
    import gradio as gr

    # The line alone (on the Critic tab, and the agreement line: one request a tick): no table, picker or detail.
    assert _outputs(fns, f"{tab}_counters") == [f"{tab}-info"] + (["critic-agreement"] if tab == "critic" else [])
    session = _Session(fns)
    line = session.call(SEARCH[tab])[f"{tab}-info"]
    assert "reviewed 0 of 3 by the team, 0 by you" in line
    assert session.call(f"{tab}_counters")[f"{tab}-info"] == gr.skip()  # nothing changed: nothing sent
    BOB_DECIDES[tab][1](store)  # meanwhile, in another browser
    ticked = session.call(f"{tab}_counters")[f"{tab}-info"]
    assert ticked == line.replace("reviewed 0 of 3 by the team, 0 by you", "reviewed 1 of 3 by the team, 0 by you")
    assert session.call(f"{tab}_counters")[f"{tab}-info"] == gr.skip()  # sent once
    session.call(f"{tab}_next")
    out = session.call(f"{tab}_next_reload")
    assert out[f"{tab}-info"] == gr.skip() and "bob" in set(out[f"{tab}-table"]["curator"])


@pytest.mark.parametrize("tab", ["pairs", "critic"])
@pytest.mark.parametrize("newer", ["second j to page 2", "a filter's load", "an action and its reload"])
def test_the_counters_tick_never_paints_over_a_newer_read_of_the_queue(store, fns, monkeypatch, tab, newer):
    """A tick reads the counts beside the tab's other reads of the queue: one that read before a newer read started
    (a load, an action's reload, a move) and answered after it would paint the older line's head over the newer. It
    sends nothing then (``QueueSessions.recount``), and the next tick counts again from what the newer read drew."""
    import gradio as gr

    session = _Session(fns)
    session.call(SEARCH[tab])
    BOB_DECIDES[tab][1](store)  # so that the tick has a new count to send
    started = _newer_read_after(monkeypatch, review_trail, "review_progress", fns, tab, newer)  # the tick's read
    assert session.call(f"{tab}_counters")[f"{tab}-info"] == gr.skip() and started
    monkeypatch.undo()
    assert session.call(f"{tab}_counters")[f"{tab}-info"] == gr.skip()  # the newer read drew the counts of now
    target = "pair" if tab == "pairs" else "verdict"
    review_trail.mark_reviewed(store, RUN, IT, target, "q1", 0, 0, curator="bob")
    assert "reviewed" in session.call(f"{tab}_counters")[f"{tab}-info"]


def test_a_tick_that_reads_across_a_walks_refresh_sends_nothing():
    """A walk's refresh draws a newer line within the generation its move began: a tick that read the older line
    before it and answered after it passed the generation check and painted the older line (its row count, its note)
    over the newer one, with a fresh counter. The tick now sends only when the line it read is still the one drawn."""
    from types import SimpleNamespace

    import gradio as gr
    import pandas as pd

    from studio.queue_sessions import QueueRead, QueueSessions, WalkedTo

    sessions, ann = QueueSessions(), SimpleNamespace(session_hash="ann")
    rows = pd.DataFrame({"key": ["a|0|0", "b|0|0"]})
    older = "20 rows · page 1 of 1 · reviewed 0 of 3 by the team"
    newer = "19 rows · page 1 of 1 · reviewed 1 of 3 by the team"
    sessions.drew(ann, ("run", 1, None), line=older, table=rows, choices=[("a", "a|0|0")], total=20)
    walk = WalkedTo("b|0|0", sessions.begin(ann))  # j: the move begins a generation
    sent: list[str] = []

    def rewrite(line: str, counts) -> str:  # the tick reads the counts; meanwhile the walk's refresh lands
        out = sessions.after_walk(ann, walk, lambda key: QueueRead(newer, rows[:1], [("b", "b|0|0")], 19,
                                                                   gr.update(), counts))
        sent.append(out[0])
        return line.replace("reviewed 0 of 3", "reviewed 1 of 3")

    assert sessions.recount(ann, rewrite) == gr.skip()
    assert sent == [newer] and sessions._sessions["ann"].line[0] == newer


def test_the_counters_timer_is_off_until_shown_and_reads_nothing_for_a_line_without_a_counter(store, fns,
                                                                                             monkeypatch):
    """Each queue tab's timer starts off and is switched in the browser (no server call) by the view key and the tab
    shown; a tick reads nothing from the store for a session that has drawn no line, or a line without a counter (an
    iteration without pairs). The switch itself is checked in the page (the next test)."""
    import gradio as gr

    from studio.team_counters import COUNTERS_S

    for tab in ("pairs", "critic"):
        on = fns[f"{tab}_counters_on"]
        (timer,) = on.outputs
        assert isinstance(timer, gr.Timer) and not timer.active and timer.value == COUNTERS_S
        assert on.fn is None and [c.elem_id for c in on.inputs] == ["view-key", "tab-key"]
        assert fns[f"{tab}_counters"].targets == [(timer._id, "tick")]
    monkeypatch.setattr(review_trail, "review_progress", lambda *a, **k: pytest.fail("the tick read the store"))
    assert fns["pairs_counters"].fn(None) == gr.skip()  # no line drawn in this session yet
    line = _search(fns, it=IT + 5)[0]
    assert line.startswith("0 rows") and "reviewed" not in line
    assert fns["pairs_counters"].fn(None) == gr.skip()


def test_in_the_page_the_team_counters_follow_another_curator_while_this_one_only_reads(tmp_path, monkeypatch):
    """In chromium, the counters' timer at 1 s: another curator decides while this one reads; the "reviewed" count
    follows on each tab without a key press, while the table and the pick stay as they were (the next key's). A hidden
    tab's timer is off (its counter waits until the tab is shown again), and so is one without a run or iteration."""
    from studio import team_counters

    monkeypatch.setattr(team_counters, "COUNTERS_S", 1.0)  # read when the app is built
    held: list[Store] = []
    with _world_page(tmp_path, held.append) as (page, expect):
        store = held[0]
        for tab in ("pairs", "critic"):
            page.get_by_role("tab", name=tab.capitalize()).click()
            pick, info = page.locator(f"#{tab}-pick input"), page.locator(f"#{tab}-info")
            expect(pick).to_have_value(re.compile("m1"))
            expect(info).to_contain_text("reviewed 0 of 3 by the team")
            BOB_DECIDES[tab][1](store)
            expect(info).to_contain_text("reviewed 1 of 3 by the team", timeout=10_000)
            if tab == "critic":  # the agreement ticks on the counters' timer (studio.critic_refresh)
                expect(page.locator("#critic-agreement")).to_contain_text("by curator: bob 0/1", timeout=10_000)
            expect(page.locator(f"#{tab}-table")).not_to_contain_text("bob")
            expect(pick).to_have_value(re.compile("m1"))
        # On the Critic tab the Pairs tab's timer is off: bob's next pair decision waits for the Pairs tab.
        review_trail.mark_reviewed(store, RUN, IT, "pair", "q1", 0, 0, curator="bob")
        page.wait_for_timeout(3000)
        assert "reviewed 1 of 3 by the team" in page.locator("#pairs-info").text_content()
        page.get_by_role("tab", name="Pairs").click()
        expect(page.locator("#pairs-info")).to_contain_text("reviewed 2 of 3 by the team", timeout=10_000)
        switch = f"({team_counters.active_js('pairs')})"
        views = {"": False, f"{RUN}\n": False, f"\n{IT}": False, f"{RUN}\n{IT}": True}
        for view, active in views.items():
            assert page.evaluate(f"{switch}({json.dumps(view)}, 'pairs')") == {"__type__": "update", "active": active}
        shown = json.dumps(f"{RUN}\n{IT}")
        assert page.evaluate(f"{switch}({shown}, 'critic')")["active"] is False  # another tab's timer stays off
        # A reload comes back to the Pairs tab (studio.place) without a click: its timer is on all the same.
        page.reload()
        expect(page.locator("#pairs-info")).to_contain_text("reviewed 2 of 3 by the team")
        review_trail.mark_reviewed(store, RUN, IT, "pair", "m1", 0, 0, curator="bob")
        expect(page.locator("#pairs-info")).to_contain_text("reviewed 3 of 3 by the team", timeout=10_000)
