"""Fixes from a second browser audit of the Export, Critic and Metrics tabs, on the hand-made worlds
(``tests._store_world``, ``tests._experiment_world``; no models, no browser):

* a refused export (an iteration with no pairs yet) left a red "Error" pill on the emptied download box and its
  reason only in a toast that faded: the reason is now the message line's answer (no file), and the export's progress
  shows on that line only;
* key ``c`` on a verdict without a correction did nothing (the *Accept correction* button is off and swallowed the
  click): the key clicks a hidden twin whose handler says why in an info toast;
* "Exported 92 pairs rows" / "Exported 96 sft rows" read "Exported 92 pairs" / "Exported 96 SFT records";
* DPO's reward accuracies at 0% were half cut off by the right axis' edge, and their line plunged across each
  iteration boundary: the share axis is padded, and every reward line (and the loss lines) breaks between
  iterations;
* with a compare run B and no evaluation rows in run A, the charts showed B's lines alone and nothing said why.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest

from engine.store import Store
from tests._experiment_world import build_experiment, run_of
from tests._store_world import RUN, studio_fns, world_store

ANN = SimpleNamespace(session_hash="ann-page", username=None)  # a browser session, as a gr.Request names it


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


# -- Export ------------------------------------------------------------------------------------------------------


def test_a_refused_export_answers_its_reason_on_the_line_and_no_file(fns):
    """Iteration 1 of the world has sampled nothing: the refusal is the message (it stays), the file None (an API
    client tells it from a success, which always carries its file); no ``gr.Error``, whose pill stayed on the box."""
    export = fns["export_file"]
    message, path = export.fn(RUN, 1, "pairs", "jsonl", "text", None)
    assert (message, path) == ("Nothing exported: iteration 1 has no pairs: its pairs stage has not run (the Run "
                               "tab's *Next stage* runs it).", None)  # markdown on the line: the marks render
    # Progress, and the pill of an error still raised (a bad input from an API client), on the line only.
    assert [c.elem_id for c in export.show_progress_on] == ["export-message"]
    with pytest.raises(gr.Error):
        export.fn(RUN, 0, "no-such-kind", "jsonl", "text", None)


def test_an_export_names_what_it_wrote_without_rows(fns):
    export = fns["export_file"]
    assert export.fn(RUN, 0, "pairs", "jsonl", "text", None)[0].startswith("Exported 3 pairs to `")
    message = export.fn(RUN, 0, "sft", "jsonl", "text", None)[0]
    assert re.match(r"Exported \d+ SFT records to `", message) and " rows to " not in message


# -- Critic: key c on a verdict without a correction ---------------------------------------------------------------


def test_key_c_on_an_off_accept_correction_clicks_a_twin_that_says_why(store, fns, toasts):
    from studio.keys import SHORTCUTS_JS, WHY

    assert WHY == {"critic-accept_correction": "critic-accept_correction-why"}
    script = re.sub(r"\s+", " ", SHORTCUTS_JS)
    assert json.dumps(WHY) in script  # the table the page reads
    # A visible button that is off: its twin is clicked instead (a disabled button takes no click).
    assert "const why = el.disabled && WHY[id] && document.getElementById(WHY[id]); (why || el).click();" in script
    why = fns["critic_accept_correction_why"]
    assert [o for o in why.outputs] == [] and why.show_progress == "hidden"
    why.fn(RUN, 0, "m1|0|0", request=ANN)  # m1: the critic accepted the grounding, no correction
    why.fn(RUN, 0, "q1|0|0", request=ANN)  # q1: unfixable, no correction either
    why.fn(RUN, 0, "", request=ANN)
    why.fn(RUN, 0, "m2|0|0", request=ANN)  # m2 has a correction: the button was off for another reason
    assert toasts == ["This verdict has no correction to accept: accept the original (a), edit it (e) or drop it "
                      "(d)."] * 2 + ["Pick a verdict first.", "Accept correction is off for this verdict."]


def test_the_twin_is_in_the_page_hidden_and_its_click_asks_why(store):
    from studio.app import build_app
    from tests._store_world import app_fns

    demo = build_app(store, "examples/demo.toml")
    twins = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "critic-accept_correction-why"]
    assert len(twins) == 1 and twins[0].visible == "hidden"  # rendered (a key can click it), never shown
    assert app_fns(demo)["critic_accept_correction_why"].targets == [(twins[0]._id, "click")]


# -- Metrics: the DPO rewards chart -------------------------------------------------------------------------------


def test_reward_lines_break_between_iterations_and_the_share_axis_is_padded(store):
    from studio.tab_metrics import figures

    for it in (1, 2):  # each iteration trains from its own start: 0% at its first step, 100% at its last
        store.add_train_logs(RUN, it, "train_planner", [
            {"step": i, "loss": 0.7, "rewards/margins": 0.5 * i, "rewards/accuracies": a}
            for i, a in ((1, 0.0), (2, 1.0))])
    fig = figures(store, RUN)["dpo_rewards"]
    lines = {t.name: t for t in fig.data}
    share = lines["rewards/accuracies (right axis)"]
    assert list(share.y) == [0.0, 1.0, None, 0.0, 1.0] and list(share.x) == [1, 2, 2.5, 3, 4]
    assert list(lines["rewards/margins"].y) == [0.5, 1.0, None, 0.5, 1.0] and not share.connectgaps
    axis = fig.layout.yaxis2
    assert list(axis.range) == [-0.05, 1.05] and axis.rangemode is None  # "tozero" put 0% on the plot's edge
    # The pairs chart's tie rate (a small share) keeps fitting its data from 0.
    assert figures(store, RUN)["pairs"].layout.yaxis2.rangemode == "tozero"
    # The planner's loss breaks between iterations the same way (a fresh training each iteration).
    assert [list(t.y) for t in figures(store, RUN)["dpo_loss"].data] == [[0.7, 0.7, None, 0.7, 0.7]]


# -- Metrics: run A without evaluation rows ---------------------------------------------------------------------


def test_the_caution_line_says_run_a_has_no_evaluation_rows(tmp_path):
    from studio.metrics_compare import task_set_caution

    with Store(tmp_path / "exp.duckdb") as s:
        build_experiment(s)
        b = run_of("no_stage1", 11)
        s.write("runs", [{"run_id": "fresh", "name": "fresh", "config_json": {}, "run_dir": "runs/fresh"}])
        note = task_set_caution(s, "fresh", b)
        assert note == ("Run A (`fresh`) has no evaluation rows yet: the evaluation charts show run B's lines "
                        "alone, and there is nothing to compare them with.")
        assert task_set_caution(s, b, "fresh") == ""  # B without rows is never offered (compare_choices)
        *_, caution = studio_fns(s)["metrics_figures"].fn("fresh", b)
        assert caution == note
