"""studio.place: a saved place (tab, run, iteration) comes back only where this store and page still have it."""

from __future__ import annotations

from studio.place import pick_iteration, pick_run, read, save_js

TABS = {"run": "Run", "pairs": "Pairs"}


def test_a_saved_place_keeps_only_what_the_page_knows():
    assert read({"tab": "pairs", "run": "r1", "iteration": 2}, TABS) == {"tab": "pairs", "run": "r1", "iteration": 2}
    assert read({"tab": "Pairs", "run": 3, "iteration": 2}, TABS) == {}  # a label is not an id; a run id is text
    assert read({"tab": "pairs", "run": "r1", "iteration": "2"}, TABS) == {"tab": "pairs", "run": "r1"}
    assert read({"run": "r1", "iteration": True}, TABS) == {"run": "r1"}  # a bool is not an iteration
    assert read({"iteration": 2}, TABS) == {}  # an iteration means nothing without its run
    for saved in (None, [], "pairs", {"run": "x" * 201}):
        assert read(saved, TABS) == {}


def test_the_saved_run_and_iteration_win_only_where_the_store_has_them():
    runs = ["old", "new"]
    assert pick_run(runs, {"run": "old"}) == "old"
    assert pick_run(runs, {"run": "deleted"}) == "new" and pick_run(runs, {}) == "new" and pick_run([], {}) is None
    wanted = {"run": "old", "iteration": 0}
    assert pick_iteration([0, 1, 2], "old", wanted) == 0
    assert pick_iteration([0, 1, 2], "new", wanted) == 2  # another run: its default
    assert pick_iteration([1, 2], "old", {"run": "old", "iteration": 5}) == 2  # gone: default


def test_the_browser_side_save_names_the_tab_it_is_for_or_reads_the_shown_one():
    assert save_js("pairs") == ('(run, iteration, auto, saved) => (run == null ? saved : {tab: "pairs", run, '
                                'iteration: (auto != null && iteration === auto ? null : iteration)})')
    assert "aria-selected" in save_js() and "dataset.tabId" in save_js()
