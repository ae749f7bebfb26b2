"""Keyboard-only curation in a real browser (Playwright on Debian's chromium): a curator walks 20 pairs (smallest
margin first) and 20 verdicts with j and y, undoes one with u, reloads, and finds every decision stored under their
name, in queue order, with the "reviewed N of M" counter to match; two curators in two browsers on one queue are
never handed the same pair. Fails (never skips) without chromium."""

from __future__ import annotations

import re
import time

import pytest
from playwright import sync_api
from test_studio_browser import (  # noqa: F401  (browser is a fixture)
    _open,
    _press_moving,
    _shot,
    _tab,
    browser,
)

from engine.leases import LeaseBook
from tests._studio import served_studio

N = 20
NAME = "keys-curator"


@pytest.fixture(scope="module")
def served_big(tmp_path_factory, tiny_agents_dir, demo_tasks):
    """The studio on a store with 24 pairs and 24 verdicts (more than one page of 20)."""
    folder = tmp_path_factory.mktemp("studio_keys")
    with served_studio(folder, tiny_agents_dir, demo_tasks, ("data.train_limit=24",)) as studio:
        _, store, run_id, _ = studio
        assert len(store.effective_pairs(run_id, 1)) > N and len(store.verdict_rows(run_id, 1)) > N
        yield studio


def _reviews(store, run_id: str, target: str) -> list[tuple]:
    """This curator's live review rows, oldest first: (task_id, step, index)."""
    index = "coalesce(pair_idx, 0)" if target == "pair_review" else "k"
    from engine.views import LIVE_OVERRIDE

    df = store.query(f"SELECT task_id, step, {index} AS i FROM overrides o WHERE run_id = ? AND target = ? AND "
                     f"curator = ? AND {LIVE_OVERRIDE} ORDER BY override_id", [run_id, target, NAME])
    return [(r.task_id, int(r.step), int(r.i)) for r in df.itertuples()]


def _wait_count(store, run_id: str, target: str, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_reviews(store, run_id, target)) != n:
        assert time.monotonic() < deadline, f"{target}: {len(_reviews(store, run_id, target))} stored, expected {n}"
        time.sleep(0.1)


def _walk(page, store, run_id: str, target: str, picker: str) -> None:
    """y then j, N times: each decision is stored before the next item is asked for."""
    body = page.locator("body")
    for i in range(N):
        before = page.locator(picker).input_value()
        body.press("y")
        _wait_count(store, run_id, target, i + 1)
        if i < N - 1:
            # on a loaded 2-core machine the key's event can queue behind the action's page reload, or be lost there
            # (_press_moving presses it again after 15 s without a move, as a curator would)
            _press_moving(page, "j", page.locator(picker), before)
        else:
            body.press("j")


def test_a_curator_reviews_twenty_pairs_and_twenty_verdicts_with_the_keyboard(served_big, browser):  # noqa: F811
    url, store, run_id, _ = served_big
    expect = sync_api.expect
    page = _open(browser, url)
    name = page.locator("#curator-name textarea, #curator-name input").first
    name.fill(NAME)
    name.press("Enter")
    expect(page.locator("#curator-who")).to_contain_text(NAME, timeout=30_000)
    name.blur()

    _tab(page, "Pairs")
    page.locator("#pairs-table").wait_for()
    want = store.pairs_page(run_id, 1, order="margin", limit=N)  # the queue: smallest margin first
    page.get_by_label("Order").click()
    page.get_by_role("option", name="smallest margin first", exact=True).click()
    head = f"{want['task_id'][0]}|{int(want['step'][0])}|{int(want['pair_idx'][0])}"
    # The table is re-ordered once the order's event is done: its first row is then the head of the queue.
    expect(page.locator("#pairs-table").get_by_role("gridcell").first).to_have_text(head)
    page.locator("#pairs-table").get_by_role("gridcell", name=head, exact=True).click()  # start at the head
    expect(page.locator("#pairs-pick input")).to_have_value(re.compile(re.escape(want["task_id"][0]) + "$"))
    expect(page.locator("#pairs-chosen")).to_contain_text("chosen k=")
    page.locator("body").click(position={"x": 5, "y": 5})  # focus back on the page, out of any field
    _walk(page, store, run_id, "pair_review", "#pairs-pick input")
    assert _reviews(store, run_id, "pair_review") == [(t, int(s), int(i)) for t, s, i in
                                                      zip(want["task_id"], want["step"], want["pair_idx"])]
    _shot(page, "Pairs-keyboard")

    _tab(page, "Critic")
    page.locator("#critic-table").wait_for()
    page.locator("body").click(position={"x": 5, "y": 5})
    _walk(page, store, run_id, "verdict_review", "#critic-pick input")
    queue = store.verdict_queue(run_id, 1, limit=N)
    assert _reviews(store, run_id, "verdict_review") == [(t, int(s), int(k)) for t, s, k in
                                                         zip(queue["task_id"], queue["step"], queue["k"])]
    page.locator("body").press("u")  # undo the last verdict review
    expect(page.locator("#critic-result")).to_contain_text("Undid your review of")
    _wait_count(store, run_id, "verdict_review", N - 1)
    _shot(page, "Critic-keyboard")

    page.reload()
    expect(page.locator("#pick-run input")).to_have_value(run_id)
    _tab(page, "Critic")
    total_verdicts = len(store.verdict_rows(run_id, 1))
    expect(page.get_by_text(f"reviewed {N - 1} of {total_verdicts} by the team, {N - 1} by you")).to_be_visible()
    _tab(page, "Pairs")
    total_pairs = len(store.effective_pairs(run_id, 1))
    # the name came back with the page (studio.remember), so the counter also says how many are this curator's
    expect(page.get_by_text(f"reviewed {N} of {total_pairs} by the team, {N} by you")).to_be_visible()
    curators = store.query("SELECT DISTINCT curator FROM overrides WHERE run_id = ?", [run_id])["curator"].tolist()
    assert curators == [NAME]
    page.close()


def _click_pair(page, key: str, task_id: str, tries: int = 3) -> None:
    """Open a pair by clicking its row, and see the pick follow. On a loaded machine the table's own refresh (a page
    load still in flight) can land after the click and pick the first row again: click again, as a curator would."""
    pattern = re.compile(re.escape(task_id) + "$")
    for attempt in range(tries):
        page.locator("#pairs-table").get_by_role("gridcell", name=key, exact=True).click()
        try:
            sync_api.expect(page.locator("#pairs-pick input")).to_have_value(pattern, timeout=15_000)
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


def test_two_curators_on_one_queue_are_not_handed_the_same_pair(served_big, browser):  # noqa: F811
    """Two browsers, two curators, one queue: the pair one of them has open is skipped by the other's j, and opening
    it anyway says who holds it (a 90 s lease, engine.leases)."""
    url, store, run_id, demo = served_big
    expect = sync_api.expect
    # a fresh lease book: the pair the first test's curator last opened is still theirs for 90 s
    demo.moat_ctx.leases = LeaseBook()
    head = store.pairs_page(run_id, 1, order="task", limit=3)
    keys = [f"{t}|{int(s)}|{int(i)}" for t, s, i in zip(head["task_id"], head["step"], head["pair_idx"])]
    pages = {}
    for who in ("lease-ann", "lease-bob"):
        page = _open(browser, url)
        name = page.locator("#curator-name textarea, #curator-name input").first
        name.fill(who)
        name.press("Enter")
        expect(page.locator("#curator-who")).to_contain_text(who, timeout=30_000)
        _tab(page, "Pairs")
        expect(page.locator("#pairs-table").get_by_role("gridcell").first).to_have_text(keys[0])
        pages[who] = page
    ann, bob = pages["lease-ann"], pages["lease-bob"]
    _click_pair(ann, keys[1], head["task_id"][1])  # ann opens the 2nd pair
    deadline = time.monotonic() + 30
    # the claim is its own event: wait until the studio's lease book holds it for ann
    while keys[1] not in demo.moat_ctx.leases.taken(("pair", run_id, 1), keys, "lease-bob"):
        assert time.monotonic() < deadline, "ann's lease was never recorded"
        time.sleep(0.1)
    _click_pair(bob, keys[0], head["task_id"][0])  # bob starts at the 1st
    # the next pair is ann's: bob is handed the third. The keys themselves are the first test's subject; here bob
    # presses j once, then clicks Next (what j clicks) if the pick did not move, as a curator would: on a loaded CI
    # machine a key was lost three times in a row (the pick stayed on the first pair for 45 s), which this test's
    # subject, the lease, cannot explain. As in _click_pair, a table refresh still in flight can also land after the
    # move and pick the first row again. Gradio can lose its event stream under load and reload the page once it
    # reconnects (back on the Run tab): then bob opens the Pairs tab and the first pair again. Each miss prints what
    # the page looked like, so a new failure says more than the last one.
    third = re.compile(re.escape(head["task_id"][2]) + "$")
    for attempt in range(3):
        bob.evaluate("() => { window.moatMark = true; }")
        if attempt == 0:
            bob.locator("body").click(position={"x": 5, "y": 5})
            bob.locator("body").press("j")
        else:
            bob.locator("#pairs-next").click()
        try:
            expect(bob.locator("#pairs-pick input")).to_have_value(third, timeout=15_000)
            break
        except AssertionError:
            seen = bob.evaluate("""() => ({reloaded: window.moatMark !== true,
                focus: document.activeElement ? document.activeElement.tagName + '#' + document.activeElement.id : '',
                lost: document.body.innerText.includes('Connection Lost'),
                pick: (document.querySelector('#pairs-pick input') || {}).value})""")
            held = demo.moat_ctx.leases.taken(("pair", run_id, 1), keys, "nobody")
            print(f"next missed (attempt {attempt + 1}): {seen}, leases held {sorted(held)}")
            assert attempt < 2, "neither j nor Next handed bob the third pair"
            assert not (seen["pick"] or "").endswith(head["task_id"][1]), "bob was handed ann's pair"
            if seen["reloaded"]:
                _tab(bob, "Pairs")
                _click_pair(bob, keys[0], head["task_id"][0])
    _click_pair(bob, keys[1], head["task_id"][1])  # opened anyway: the studio says who holds it
    expect(bob.locator("#pairs-lease")).to_contain_text("lease-ann")
    # and refuses bob's decision on it: it would have replaced ann's unseen
    bob.locator("#pairs-swap").click()
    expect(bob.get_by_text("lease-ann has this pair open right now: a decision here would replace theirs unseen",
                           exact=False).first).to_be_visible(timeout=15_000)
    assert store.query("SELECT count(*) AS n FROM overrides WHERE curator = 'lease-bob'")["n"][0] == 0
    ann.close()
    bob.close()



def test_filters_and_name_survive_a_reload_and_the_overruled_verdicts_are_one_click_away(served_big, browser):  # noqa: F811
    """A curator's queue filters and name are kept in their browser (studio.remember): after a reload the Pairs
    queue is still in "length bias first" order and the name is still set. The agreement line's button filters the
    critic queue to the verdicts where a curator overruled the critic."""
    from engine import verdict_curation

    url, store, run_id, _ = served_big
    expect = sync_api.expect
    rows = store.verdict_queue(run_id, 1, overridden=False, limit=500)
    target = rows[rows["status"].isin(["accepted", "corrected"])].iloc[0]  # a drop overrules the critic here
    verdict_curation.drop_verdict(store, run_id, 1, target["task_id"], int(target["step"]), int(target["k"]),
                                  curator="keeper")
    length_head = store.pairs_page(run_id, 1, order="length", limit=1)
    head = f"{length_head['task_id'][0]}|{int(length_head['step'][0])}|{int(length_head['pair_idx'][0])}"

    page = _open(browser, url)
    name = page.locator("#curator-name textarea, #curator-name input").first
    name.fill("keeper")
    name.press("Enter")
    expect(page.locator("#curator-who")).to_contain_text("keeper")
    _tab(page, "Pairs")
    page.locator("#pairs-order input").click()
    page.get_by_role("option", name="length bias first", exact=True).click()
    expect(page.locator("#pairs-table").get_by_role("gridcell").first).to_have_text(head)

    page.reload()
    expect(page.locator("#curator-who")).to_contain_text("keeper")
    expect(name).to_have_value("keeper")
    _tab(page, "Pairs")
    expect(page.locator("#pairs-order input")).to_have_value("length bias first")
    expect(page.locator("#pairs-table").get_by_role("gridcell").first).to_have_text(head)

    _tab(page, "Critic")
    expect(page.locator("#critic-agreement")).to_contain_text("Overruled the critic (1)")
    page.locator("#critic-overruled").click()
    key = f"{target['task_id']}|{int(target['step'])}|{int(target['k'])}"
    expect(page.locator("#critic-table").get_by_role("gridcell").first).to_have_text(key)
    expect(page.locator("#critic-info")).to_contain_text("1 row ·")
    page.reload()  # the critic's filter is remembered too
    _tab(page, "Critic")
    expect(page.locator("#critic-table").get_by_role("gridcell").first).to_have_text(key)
    page.close()


def test_the_pairs_table_fits_1400px_and_a_mistake_reads_plainly(served_big, browser, capfd):  # noqa: F811
    """At 1400 px the columns a curator decides by (margin, override) are on screen, the question's column capped;
    a key pressed before any curator name is entered says so in plain words (no quotes around the message) and
    leaves no traceback in the server's log."""
    url, store, run_id, _ = served_big
    expect = sync_api.expect
    page = _open(browser, url)  # 1400 px wide, a fresh browser: no curator name yet
    _tab(page, "Pairs")
    table = page.locator("#pairs-table")
    expect(table.get_by_role("gridcell").first).to_have_text(re.compile(r"\|\d+\|\d+\s*$"))
    seen = page.evaluate("""() => {
        const table = document.querySelector('#pairs-table'), right = Math.min(window.innerWidth,
            table.getBoundingClientRect().right);
        return {right, heads: [...table.querySelectorAll('th')].map(
            (th) => [th.textContent.trim().split(" ")[0], th.getBoundingClientRect().right])};  // name, then a menu
    }""")
    heads = {name: r for name, r in seen["heads"] if name in ("margin", "override_action", "curator")}
    assert set(heads) == {"margin", "override_action", "curator"}, seen
    assert all(r <= seen["right"] for r in heads.values()), seen
    capfd.readouterr()
    table.get_by_role("gridcell").first.click()
    expect(page.locator("#pairs-chosen")).to_contain_text("chosen k=")
    page.locator("body").click(position={"x": 5, "y": 5})
    page.locator("body").press("s")
    expect(page.get_by_text("Enter your curator name at the top of the page first").first).to_be_visible()
    assert "'Enter your curator name" not in page.evaluate("() => document.body.innerText")
    assert "Enter your curator name" not in capfd.readouterr().err  # Gradio prints a traceback with the message
    assert not len(store.query("SELECT * FROM overrides WHERE curator = ''"))
    page.close()
