"""Fixes from a browser audit of the Critic and Pairs tabs: *Accept original* on a grounding that does not run says so
(as *Save edit* does for an edit that does not run), the agreement line follows another curator's decisions on a timer
(one small query a tick, redrawn only when the verdict log changed), a toast shows plain text (no markdown marks, which
Gradio's toasts show literally), and "nothing to undo" is an info toast, not a red error modal.

Handlers are called as the page's events call them (``build_app``'s functions by endpoint name) on the hand-made
store of ``tests/_store_world.py`` (no models)."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.utils import error_payload

from engine import review_trail, verdict_curation
from tests._store_world import IT, RUN, studio_fns, world_store

ANN = SimpleNamespace(session_hash="ann-page", username=None)  # a browser session, as a gr.Request names it
CRITIC_FILTERS = ("", "any", "task", 1)  # status, reviewed, order, page


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def fns(store):
    return studio_fns(store)


@pytest.fixture
def toasts(monkeypatch) -> list[str]:
    """The info toasts a handler shows (``gr.Info``'s messages), in order."""
    shown: list[str] = []
    monkeypatch.setattr(gr, "Info", lambda message, *a, **k: shown.append(message))
    return shown


# -- Accept original on a grounding that does not run ----------------------------------------------------------------


def _failing_original(store) -> str:
    """Plan 1 of m2 grounded with actions the executor fails on, and a critic correction of them: its key."""
    key = dict(run_id=RUN, iteration=IT, task_id="m2", step=0, k=1)
    store.write_batch([
        ("groundings", [{**key, "prompt": "p", "actions": "R1 = Calculator(10 +)", "values_json": {}, "answer": None,
                         "error": "R1 = Calculator(10 +): cannot parse formula", "ok": False, "correct": False}]),
        ("verdicts", [{**key, "backend": "reference", "model": None, "reference_guided": True, "raw": "",
                       "status": "corrected", "corrected_subgoals_json": ["Subtract 4 from 10."],
                       "corrected_actions": "R1 = Calculator(10-4)"}]),
    ])
    return "m2|0|1"


def test_accepting_an_original_that_does_not_run_warns_as_save_edit_does_and_records_it(store, fns):
    """*Save edit* said plainly that saved actions do not run; *Accept original* (its button, and the key a that
    clicks it) on a grounding the executor failed on said only "recorded". It now says it does not run, why, and
    what the curator could do instead; the decision is recorded all the same, and its line still ends on its id."""
    accept = fns["critic_keep_original"]
    line = accept.fn(RUN, IT, _failing_original(store), "ann", "", None)
    first, _, warning = line.partition("\n\n")
    assert first.startswith("“Accept original” recorded for") and first.endswith(").")
    oid = int(first.rsplit("#", 1)[1].rstrip(")."))
    assert warning == ("**But it does not run**: R1 = Calculator(10 +): cannot parse formula. It will train the "
                       "grounder on actions that reach no answer: *Accept correction*, edit them, or *Drop* the "
                       "verdict instead.")
    stored = store.frame("overrides", RUN)
    assert stored[["override_id", "task_id", "k", "action"]].values.tolist() == [[oid, "m2", 1, "keep_original"]]
    # q1's original failed too, with no error recorded and no correction to accept instead
    q1 = accept.fn(RUN, IT, "q1|0|0", "ann", "", None)
    assert q1.endswith("\n\n**But it does not run**: the executor failed on it. It will train the grounder on actions "
                       "that reach no answer: edit them, or *Drop* the verdict instead.")
    # an original that runs (m2's plan 0: to a wrong answer, but it runs) gets the line alone
    assert "\n" not in accept.fn(RUN, IT, "m2|0|0", "ann", "", None)
    # the other decisions on a failing original warn of nothing: they do not train on it
    assert "does not run" not in fns["critic_drop"].fn(RUN, IT, "q1|0|0", "ann", "", None)


# -- the agreement line follows the team ----------------------------------------------------------------------------


def _tick(fns, request=ANN):
    """One tick of the Critic tab's team timer for ``request``'s session: what it sends the agreement line (its second
    output, after the team counter)."""
    tick = fns["critic_counters"]
    assert [o.elem_id for o in tick.outputs][1:] == ["critic-agreement"] and not tick.inputs
    return tick.fn(request)[1]


def _load(fns, request=ANN) -> str:
    """The Critic tab's load for ``request``'s session: the agreement line it draws."""
    out = fns["critic_queue"].fn(RUN, IT, *CRITIC_FILTERS, None, "rita", request)
    return out[[getattr(o, "elem_id", None) for o in fns["critic_queue"].outputs].index("critic-agreement")]


def test_the_agreement_follows_another_curators_decisions_on_a_tick(store, fns):
    """The agreement line was drawn by this curator's own load and actions only: a teammate's decision never showed
    in it while this curator read. Its timer now draws it again when the iteration's verdict log has changed (a
    decision, a "looks right", an undo), once, and sends nothing otherwise or to a session that has drawn none."""
    assert _tick(fns) == gr.skip()  # no line drawn in this session yet
    assert "(0/0 reviewed of 3 verdicts)" in _load(fns)
    assert _tick(fns) == gr.skip()  # nothing changed
    verdict_curation.keep_original(store, RUN, IT, "m2", 0, 0, curator="bob")  # in another browser
    drawn = _tick(fns)
    assert "(0/1 reviewed of 3 verdicts)" in drawn and "by curator: bob 0/1" in drawn
    assert _tick(fns) == gr.skip()  # sent once
    review_trail.undo_last(store, RUN, IT, "bob", "verdict")  # an undo changes the agreement too
    assert "(0/0 reviewed of 3 verdicts)" in _tick(fns)
    review_trail.mark_reviewed(store, RUN, IT, "verdict", "m1", 0, 0, curator="bob")
    assert "(1/1 reviewed of 3 verdicts)" in _tick(fns)
    assert _tick(fns, SimpleNamespace(session_hash="other", username=None)) == gr.skip()


def test_an_agreement_tick_with_nothing_new_is_one_small_query(store, fns, monkeypatch):
    """The tick runs every 10 s on every Critic page: with nothing decided it reads one count of the verdict log and
    never the agreement (a pass over every verdict)."""
    from studio import critic_refresh, team_counters

    _load(fns)
    # The same tick's team counter is a read of its own (studio.team_counters): only the agreement's reads count here.
    monkeypatch.setattr(team_counters, "recount", lambda *a: gr.skip())
    queries: list[str] = []
    real_query = store.query
    monkeypatch.setattr(store, "query", lambda sql, params=None: queries.append(sql) or real_query(sql, params))
    monkeypatch.setattr(critic_refresh, "agreement_markdown",
                        lambda *a: pytest.fail("the tick read the agreement with nothing new"))
    assert _tick(fns) == gr.skip()
    assert len(queries) == 1 and "FROM overrides" in queries[0]


def test_an_agreement_tick_never_paints_over_a_newer_drawing(store, fns, monkeypatch):
    """A tick that read the agreement while the session's load (or an action's reload) drew a newer line sends
    nothing, and the next tick counts from what that drawing read."""
    from studio import critic_refresh

    _load(fns)
    verdict_curation.drop_verdict(store, RUN, IT, "q1", 0, 0, curator="bob")
    real = critic_refresh.agreement_markdown
    loaded: list[str] = []
    calls: list[int] = []

    def read_while_a_load_draws(*args):
        calls.append(1)
        if len(calls) == 1:  # the tick's read: a load of the page starts and draws meanwhile
            loaded.append(_load(fns))
        return real(*args)

    monkeypatch.setattr(critic_refresh, "agreement_markdown", read_while_a_load_draws)
    assert _tick(fns) == gr.skip() and "(1/1 reviewed" in loaded[0]
    assert _tick(fns) == gr.skip()  # the load drew the log as it is now


def test_the_agreement_rides_the_team_counters_tick_one_request_a_tick(fns):
    """The agreement had a timer of its own beside the team counters', then a second event on the counters' timer:
    two requests (two passes over the page's components, studio.pace) every 10 s on every Critic page. It is now the
    second output of the counters' one tick. The timer starts off and is switched in the browser (no server call) by
    the view key and the tab shown: it ticks only while the Critic tab shows a run and an iteration. That timer is
    the only one any Critic endpoint ticks on, and one endpoint ticks on it."""
    from studio.team_counters import COUNTERS_S

    on = fns["critic_counters_on"]
    (timer,) = on.outputs
    assert isinstance(timer, gr.Timer) and not timer.active and timer.value == COUNTERS_S
    assert on.fn is None and [c.elem_id for c in on.inputs] == ["view-key", "tab-key"]
    assert "'critic'" in on.js or '"critic"' in on.js
    ticks = [name for name, fn in fns.items() for target, event in fn.targets if event == "tick"
             and name.startswith("critic_")]
    assert ticks == ["critic_counters"] and fns["critic_counters"].targets == [(timer._id, "tick")]
    assert [o.elem_id for o in fns["critic_counters"].outputs] == ["critic-info", "critic-agreement"]
    switches = [name for name, fn in fns.items() if any(getattr(o, "_id", None) == timer._id for o in fn.outputs)]
    assert switches == ["critic_counters_on"] and "critic_agreement" not in fns


# -- toasts show plain text -----------------------------------------------------------------------------------------


def test_a_toast_shows_its_message_without_markdown_marks(toasts):
    """Gradio renders a toast's text as HTML, not markdown: an engine refusal worded for the page (the export's "its
    ground stage has not run (`python -m engine step ...`)", the Run tab's *Next stage*) showed its backticks and
    stars. The error modal and the info toasts now get the text without them; stars inside a formula stay, and for
    the page a ``<`` is escaped, so it shows as itself instead of opening a tag."""
    from studio.common import toast_text, user_errors, user_info

    with pytest.raises(gr.Error) as err, user_errors():
        raise ValueError("Nothing exported: its ground stage has not run "
                         "(`python -m engine step ground --run r --iteration 1`); **or** the Run tab's *Next stage*")
    shown = error_payload(err.value, False)["error"]
    assert shown == ("Nothing exported: its ground stage has not run (python -m engine step ground --run r "
                     "--iteration 1); or the Run tab's Next stage")
    user_info("`j`/`k` skip it")
    assert toasts == ["j/k skip it"]
    assert toast_text("R2 = Calculator(R1*2*3) and `2**3`") == "R2 = Calculator(R1*2*3) and 2**3"
    assert toast_text("margin bounds must be numbers, got '<1'") == "margin bounds must be numbers, got '<1'"
    assert toast_text("no <tokenizer> template", page=True) == "no &lt;tokenizer&gt; template"  # the page: escaped
    assert toast_text("no <tokenizer> template") == "no <tokenizer> template"  # no page asked: as worded


def _shown_as_html(text: str) -> str:
    """What a page shows of ``text`` set as HTML, as Gradio sets a toast's (its text, references decoded); fails on
    anything the parser takes for markup, which the toast would drop."""
    from html.parser import HTMLParser

    class Shown(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.parts: list[str] = []

        def handle_data(self, data: str) -> None:
            self.parts.append(data)

        def unknown(self, *args) -> None:
            pytest.fail(f"{text!r} holds markup: {args}")

        handle_starttag = handle_endtag = handle_comment = handle_decl = handle_pi = unknown

    shown = Shown()
    shown.feed(text)
    shown.close()
    return "".join(shown.parts)


@pytest.mark.parametrize("message", ["margin bounds must be numbers, got '<1' & '>2'", "a < b && c <= d",
                                     "R&D and AT&T's Q&A", "no <tokenizer> template, see </b> and <!-- x --> or &lt;",
                                     "&amp &#60; &copyright &Dagger;"])
def test_a_toast_is_safe_in_html_and_an_api_client_reads_it_as_worded(message):
    """Gradio renders a toast as HTML and has no plain-text mode, but sends an API client (``gradio_client``) the
    same text as the error's message: escaping every ``<`` and ``&`` showed it ``got '&lt;1'``. The text is escaped
    for the studio's page alone (``studio.common.asked_by_the_page``), whose toast shows the message as worded; any
    other caller reads it unchanged (tests/test_studio_toast_text.py); ``quiet_stop``'s message, which no page shows,
    reaches it plain whatever it holds."""
    from studio.common import quiet_stop, toast_text, user_error

    assert _shown_as_html(toast_text(message, page=True)) == message
    assert error_payload(user_error(message), False)["error"] == message  # "R&D" reached the client as "R&amp;D"
    assert error_payload(quiet_stop(f"`{message}`"), False)["error"] == message


# -- nothing to undo -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tab, scope", [("critic", "verdict"), ("pairs", "pair")])
def test_nothing_to_undo_is_an_info_toast_not_an_error(store, fns, toasts, tab, scope):
    """``u`` (it clicks the Undo button: one handler) with nothing of this curator's left to undo showed a red
    "Error" modal; it is no mistake. It is now an info toast, and the event stops without a modal (the error it
    raises to stop the reload after it is not shown) or a traceback. A real mistake (no curator name) stays an
    error, and an undo that undoes says so in the page as before."""
    undo = fns[f"{tab}_undo"]
    with pytest.raises(gr.Error) as err:
        undo.fn(RUN, IT, "nobody", None)
    payload = error_payload(err.value, False)
    assert payload["visible"] is False and not err.value.print_exception
    assert toasts == [f"nobody has nothing to undo on the {scope}s of iteration {IT}."] == [payload["error"]]
    with pytest.raises(gr.Error) as no_name:
        undo.fn(RUN, IT, "", None)
    assert error_payload(no_name.value, False)["visible"] is True and len(toasts) == 1
    if tab == "critic":
        verdict_curation.drop_verdict(store, RUN, IT, "q1", 0, 0, curator="ann")
    else:
        review_trail.mark_reviewed(store, RUN, IT, "pair", "m1", 0, 0, curator="ann")
    assert undo.fn(RUN, IT, "ann", None).startswith("Undid your ") and len(toasts) == 1
