"""Follow-ups to the Critic, Run and Pairs tabs, on the hand-made world (``tests._store_world``):

* the executor's error text went into the Critic tab's Markdown as it was: an error holding ``2*x*3``, ``_x_`` or
  backticks rendered an italic x or code and lost its characters (*Accept original*'s warning, *Save edit*'s);
* a running stage's summary said "running" beside the status "running", a failed one with no counts "failed" beside
  "failed": a running stage now says what it does, a failed card its error's first line;
* the Pairs tab's charts carried gradio's "Plot" label, and the margin histogram's count axis could tick at 0.5 pair.

The Markdown is rendered with ``markdown_it`` (CommonMark, as the page's renderer reads it: gradio depends on it
through typer and rich) to check what the curator reads, not which backslashes the source holds.
"""

from __future__ import annotations

import html
import re

import gradio as gr
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from engine.store import Store
from tests._store_world import IT, RUN, studio_fns, world_store

# An executor's error with every kind of inline Markdown in it: emphasis both ways, code, a link, a tag, an entity.
NASTY = "R1 = Foo(2*x*3): `tool` _Foo_ is [unknown](x) <b>here</b> &amp; ~~gone~~ | a\\b"


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def rendered(markdown: str) -> tuple[str, str]:
    """``(html, visible text)`` of ``markdown`` as a CommonMark page shows it (GFM's strike and tables on)."""
    page = MarkdownIt("commonmark").enable(["strikethrough", "table"]).render(markdown)
    return page, html.unescape(re.sub(r"<[^>]+>", "", page))


def _failing_original(store: Store, error: str) -> str:
    """Plan 1 of m2 grounded with actions the executor failed on with ``error``, and a critic correction: its key."""
    key = dict(run_id=RUN, iteration=IT, task_id="m2", step=0, k=1)
    store.write_batch([
        ("groundings", [{**key, "prompt": "p", "actions": "R1 = Foo(2*x*3)", "values_json": {}, "answer": None,
                         "error": error, "ok": False, "correct": False}]),
        ("verdicts", [{**key, "backend": "reference", "model": None, "reference_guided": True, "raw": "",
                       "status": "corrected", "corrected_subgoals_json": ["Subtract 4 from 10."],
                       "corrected_actions": "R1 = Calculator(10-4)"}]),
    ])
    return "m2|0|1"


# -- 1. the executor's text shows as typed ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", [NASTY, "*bold* and __strong__", "`a` ``b``", "# not a heading", "x_1_y * 2 *"])
def test_escaped_text_renders_as_typed(text):
    from studio.render import md_code, md_escaped

    page, visible = rendered(f"error: {md_escaped(text)}.")
    assert visible.strip() == f"error: {text}."
    assert not re.search(r"<(em|strong|code|a|b|s|del)\b", page), page
    page, visible = rendered(f"answer: {md_code(text)}")  # as code: one span, its text whole
    assert page.count("<code>") == 1 and html.unescape(re.search(r"<code>(.*)</code>", page).group(1)) == text


def test_accept_original_shows_the_executors_error_as_typed(store):
    from studio.tab_critic import verdict_action

    line = verdict_action(store, RUN, IT, _failing_original(store, NASTY), "keep_original", "ann")
    page, visible = rendered(line.partition("\n\n")[2])
    assert f"But it does not run: {NASTY}. It will train the grounder" in visible
    assert page.count("<strong>") == 1 and "<code>" not in page  # the bold lead-in only: nothing of the error's
    assert "<em>Accept correction</em>" in page and "<em>Foo</em>" not in page and "<em>x</em>" not in page


def test_save_edit_shows_the_executors_error_as_typed(store):
    from studio.tab_critic import save_edit

    error = "R1 = Foo(2*x*3): unknown tool Foo"  # what the executor says of these actions
    line = save_edit(store, RUN, IT, "m2|0|0", "R1 = Foo(2*x*3)", "ann")
    page, visible = rendered(line)
    assert f"but it does not run: {error}. It will train" in visible and f"execution error: {error}" in visible
    assert "<em>x</em>" not in page
    refused = save_edit(store, RUN, IT, "m2|0|0", "R1 = Foo(*x*", "ann")  # does not parse: not saved, said why
    page, visible = rendered(refused)
    assert visible.startswith("Not saved — parse error:") and "(*x*" in visible and "<em>" not in page


def test_an_answer_with_backticks_stays_one_code_span(store):
    from engine.executor import ExecutionResult
    from studio.tab_critic import _result_markdown

    page, _ = rendered(_result_markdown(ExecutionResult(True, {"R_1": "a*b*c"}, "`x`", None)))
    assert "<code>`x`</code>" in page and "<code>R_1</code> = a*b*c" in page and "<em>" not in page


# A curator name with every Markdown and HTML trap a login or a typed name could hold.
ODD = "*ana*_<b>"


def test_curator_names_and_verdict_labels_show_as_typed_on_the_critic_tab(store, monkeypatch):
    """A curator's name and a verdict's label (its question) went into the Critic tab's Markdown as they were: a
    curator named ``*ana*_<b>`` read as an italic ana and lost ``<b>`` as a tag, in the action's line, the next
    curator's "replacing ..." note, the agreement's "by curator", the lease note and the header; the verdict's HTML
    view took the name as markup too."""
    from studio import critic_lines
    from studio.common import Ctx, identity_line, lease_note
    from studio.critic_queue import agreement_markdown, verdict_view
    from studio.tab_critic import save_edit, verdict_action

    def assert_as_typed(markdown: str, *typed: str) -> str:
        page, visible = rendered(markdown)
        assert all(t in visible for t in typed), visible
        assert not re.search(r"<(em|b|s|del|a)\b", page), page
        return page

    assert_as_typed(verdict_action(store, RUN, IT, "m2|0|0", "drop", ODD), f"by {ODD} (override #")
    replacing = verdict_action(store, RUN, IT, "m2|0|0", "keep_original", "bob")
    assert_as_typed(replacing, f"by bob, replacing {ODD}'s drop")
    verdict_action(store, RUN, IT, "m1|0|0", "reviewed", ODD)
    assert_as_typed(agreement_markdown(store, RUN, IT), f"by curator: {ODD} 1/1, bob ")
    page = assert_as_typed(lease_note(ODD, "verdict"), f"⚠ {ODD} has this verdict open right now")
    assert page.count("<strong>") == 1
    ctx = Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None)
    assert_as_typed(identity_line(ctx, ODD), f"Curating as {ODD}")
    saved = save_edit(store, RUN, IT, "q1|0|0", "R1 = Calculator(10-4)", ODD)
    assert_as_typed(saved.partition("\n\n")[0], f"” by {ODD}")
    corrected = verdict_view(store, RUN, IT, "q1|0|0")[1]
    assert f"(edit by {html.escape(ODD)})" in corrected
    label = "What is *2*_x_ <b>here</b>? · plan 0 · accepted · m2"
    monkeypatch.setattr(critic_lines, "verdict_name", lambda *a: label)
    assert_as_typed(verdict_action(store, RUN, IT, "m1|0|0", "reviewed", "bob"), f"recorded for “{label}” by bob")


# -- 2. a stage's summary says its state once ------------------------------------------------------------------------


def _card_summary(page: str, stage: str) -> tuple[str, str]:
    """``(status line, summary)`` of ``stage``'s card in ``pipeline_html``'s page, as shown (entities read)."""
    card = re.search(rf'data-stage="{stage}".*?</div></div></div>', page, re.S).group(0)
    status = re.search(r'<div style="color:#[0-9a-f]+">(.*?)</div>', card).group(1)
    summary = re.findall(r'<div style="color:#444">(.*?)</div>', card)[0]
    return html.unescape(status), html.unescape(summary)


def test_a_running_stage_says_what_it_does_not_that_it_runs(store):
    from studio.pipeline import pipeline_html
    from studio.tab_run import stage_table

    store.set_stage(RUN, IT, "ground", "running")
    row = stage_table(store, RUN, live=True).set_index("stage").loc["ground"]
    assert row["status"] == "running" and row["summary"] == "grounding plans"
    events = [{"iteration": IT, "stage": "ground", "done": 0, "total": 0, "message": "started: torch threads 2"}]
    assert _card_summary(pipeline_html(store, RUN, {"events": events}, live=True), "ground") == (
        "running", "grounding plans")  # the stage's opening message says nothing the bar does not
    events.append({"iteration": IT, "stage": "ground", "done": 1, "total": 4, "eta_s": 3.0, "message": "8 groundings"})
    status, summary = _card_summary(pipeline_html(store, RUN, {"events": events}, live=True), "ground")
    assert status.startswith("running · 1/4") and summary == "grounding plans: 8 groundings"


def test_a_failed_stage_without_counts_gives_its_errors_first_line_not_failed_again(store):
    from studio.pipeline import pipeline_html
    from studio.tab_run import stage_table

    store.set_stage(RUN, IT, "critique", "running")
    store.set_stage(RUN, IT, "critique", "failed",
                    error="critic backend <openai> refused: 429\nTraceback (most recent call last):\n  ...")
    assert _card_summary(pipeline_html(store, RUN, {}, live=False), "critique") == (
        "failed", "critic backend <openai> refused: 429")  # no error column beside a card
    row = stage_table(store, RUN).set_index("stage").loc["critique"]
    assert row["status"] == "failed" and row["summary"] == ""  # the table's error column says it
    assert row["error"].startswith("critic backend <openai> refused: 429")
    store.set_stage(RUN, IT, "sample", "running")
    store.set_stage(RUN, IT, "sample", "failed")  # no error recorded: nothing to add to the status
    assert _card_summary(pipeline_html(store, RUN, {}, live=False), "sample") == ("failed", "")


def test_a_long_error_is_cut_in_the_summary():
    from studio.stage_text import ERROR_WIDTH, error_line

    line = error_line("x" * 500 + "\nmore")
    assert len(line) == ERROR_WIDTH and line.endswith("…") and error_line(None) == "" and error_line("\nTrace") == ""


# -- 3. the Pairs tab's charts ---------------------------------------------------------------------------------------


def test_the_pairs_charts_carry_no_plot_label(store):
    plots = [o for o in studio_fns(store)["pairs_search"].outputs if isinstance(o, gr.Plot)]
    assert len(plots) == 2 and [p.show_label for p in plots] == [False, False]


@pytest.mark.parametrize("margins", [[1.5, 0.3, 0.7], [0.42], [0.1] * 3 + [0.2], [0.3, 0.7, 0.5] * 70,
                                     [i / 97 for i in range(-300, 900, 7)]])
def test_the_margin_histogram_counts_whole_pairs(store, margins):
    from studio.pairs_charts import MARGIN_BINS, margin_figure
    from studio.plots import COUNT_TICKS

    fig = margin_figure(store, RUN, IT, pd.DataFrame({"margin": margins}))
    bins, axis = fig.data[0].xbins, fig.layout.yaxis
    assert bins.start <= min(margins) and bins.end > max(margins)  # every pair in a bin
    assert (bins.end - bins.start) / bins.size <= MARGIN_BINS + 2
    edges = [bins.start + i * bins.size for i in range(int((bins.end - bins.start) / bins.size) + 2)]
    tallest = max(sum(lo <= m < hi for m in margins) for lo, hi in zip(edges, edges[1:]))
    assert axis.dtick >= 1 and axis.dtick == int(axis.dtick) and axis.tickformat == "d"  # never 0.5 pair
    assert tallest / axis.dtick <= COUNT_TICKS and axis.title.text == "pairs"


def test_the_world_histogram_ticks_one_pair_at_a_time(store):
    from studio.pairs_charts import margin_figure

    fig = margin_figure(store, RUN, IT)  # three pairs, one a bar: plotly's own steps were 0.2 or 0.5 pair
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.tick0 == 0 and len(fig.data[0].x) == 3
