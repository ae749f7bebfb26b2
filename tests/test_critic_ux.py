"""What a curator reads on the Critic tab: no ``nan`` or ``None`` in a sentence, "looks right" counts as agreeing
with the critic (so "reviewed N" and the agreement line count the same reviews), and a verdict without a
correction says so in one line with *Accept correction* switched off."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from engine import review_trail, verdict_curation
from engine.agreement import agreement
from engine.config import RunConfig
from engine.critics.base import Grounding
from engine.critics.prompts import execution_text
from engine.critics.reference import ReferenceCritic
from engine.executor import ExecutionResult
from engine.stages import critique
from engine.stages.context import StageContext
from engine.store import Store
from tests._store_world import IT, RUN, TASKS, add_iterative_step, build_world, world_store


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


# -- 1. a missing execution error is None, never NaN -----------------------------------------------------------------


@pytest.mark.parametrize("missing", [None, math.nan, pd.NA])
def test_a_grounding_without_an_error_or_answer_reads_none(missing):
    """pandas fills a missing text cell with NaN, and NaN is truthy: "execution failed: nan" on the page."""
    m2 = next(t for t in TASKS if t.id == "m2")
    item = Grounding(m2, 0, 0, ["Add 10 and 4."], "R1 = Calculator(10+4)",
                     {"ok": True, "values": {"R1": "14"}, "answer": missing, "error": missing}, False)
    assert item.execution["error"] is None and item.execution["answer"] is None
    (verdict,) = ReferenceCritic().judge([item])
    assert verdict.status == "corrected" and "nan" not in verdict.raw and "None" not in verdict.raw
    assert verdict.raw.startswith("no answer")
    assert "nan" not in execution_text(item.execution) and "error" not in execution_text(item.execution)


def test_the_critique_stage_never_writes_nan_into_a_verdict(store, tmp_path):
    """The demo's case: one grounding has an error, so DuckDB's text column comes back with NaN for the others."""
    q1 = store.frame("groundings", RUN, IT, task_id="q1").iloc[0].to_dict()
    store.write("groundings", [{**q1, "error": "R1 = Ask(someone): unknown tool Ask"}])
    store.delete("verdicts", RUN, IT)
    critique.run(StageContext(store, RUN, IT, RunConfig(), tmp_path))
    raw = store.frame("verdicts", RUN, IT).set_index("task_id")["raw"]
    assert raw["m2"].startswith("no answer") and "nan" not in raw["m2"], raw["m2"]
    assert raw["q1"].startswith("execution failed: R1 = Ask(someone): unknown tool Ask"), raw["q1"]


# -- 2. "looks right" agrees with the critic -------------------------------------------------------------------------


def test_looks_right_counts_as_agreeing_with_the_critic(store):
    from studio.queue_lines import review_line
    from studio.tab_critic import agreement_markdown

    review_trail.mark_reviewed(store, RUN, IT, "verdict", "m1", 0, 0, curator="ann")  # looks right: agrees
    # a correction refused: overrules the critic
    verdict_curation.keep_original(store, RUN, IT, "m2", 0, 0, curator="bo")
    a = agreement(store, RUN, IT)
    assert (a["verdicts"], a["reviewed"], a["agreed"], a["disagreed"], a["rate"]) == (3, 2, 1, 1, 0.5)
    assert a["by_action"] == {"reviewed": {"reviewed": 1, "agreed": 1}, "keep_original": {"reviewed": 1, "agreed": 0}}
    assert a["by_curator"] == {"ann": {"reviewed": 1, "agreed": 1}, "bo": {"reviewed": 1, "agreed": 0}}
    assert a["by_status"] == {"accepted": {"reviewed": 1, "agreed": 1}, "corrected": {"reviewed": 1, "agreed": 0}}
    assert [d["task_id"] for d in a["disagreements"]] == ["m2"]
    text = agreement_markdown(store, RUN, IT)
    assert "**Agreement critic ↔ curators: 50%** (1/2 reviewed of 3 verdicts)" in text
    assert "looks right 1/1" in text and "accept original 0/1" in text
    assert review_line(store, RUN, IT, "verdict") == " · reviewed 2 of 3 by the team"  # the same two reviews
    # the queue's "overruled" filter follows the same rule: "looks right" confirmed the critic
    assert store.verdict_queue(RUN, IT, overruled=False)["task_id"].tolist() == ["m1"]
    assert store.verdict_queue(RUN, IT, overruled=True)["task_id"].tolist() == ["m2"]
    # "looks right" on an overridden verdict confirms the curator's decision, not the critic's: still overruled
    review_trail.mark_reviewed(store, RUN, IT, "verdict", "m2", 0, 0, curator="ann")
    assert agreement(store, RUN, IT)["disagreed"] == 1
    assert store.verdict_queue(RUN, IT, overruled=True)["task_id"].tolist() == ["m2"]
    # a review taken back is no review
    review_trail.undo_last(store, RUN, IT, "ann", "verdict")
    review_trail.undo_last(store, RUN, IT, "ann", "verdict")
    assert (agreement(store, RUN)["reviewed"], agreement(store, RUN)["agreed"]) == (1, 0)


# -- 3. no Python None in the edit preview ---------------------------------------------------------------------------


def test_an_edit_preview_without_an_answer_says_so(store):
    from studio.tab_critic import _result_markdown, preview_edit

    text = preview_edit(store, RUN, "m2|0|0", "R1 = Calculator(3*(4+5)")
    assert text.startswith("**execution error: parse error") and "None" not in text and "no answer" in text
    assert "answer: `17`" in _result_markdown(ExecutionResult(True, {"R1": "17"}, "17", None))
    assert "None" not in _result_markdown(ExecutionResult(True, {}, None, None))


# -- 4. a verdict without a correction ------------------------------------------------------------------------------


def test_an_accepted_verdict_says_so_and_switches_accept_correction_off(store):
    from studio.tab_critic import verdict_view

    original, corrected, diff, start, button = verdict_view(store, RUN, IT, "m1|0|0")
    assert "The critic accepted the grounding as it is" in corrected
    assert "Corrected subgoals" not in corrected and "Corrected actions" not in corrected
    assert button["interactive"] is False and start == "R1 = Calculator(3*4); R2 = Calculator(R1+5)"
    *_, button = verdict_view(store, RUN, IT, "q1|0|0")  # unfixable: no correction either, said as such
    assert button["interactive"] is False
    assert "Corrected actions" not in verdict_view(store, RUN, IT, "q1|0|0")[1]
    original, corrected, diff, start, button = verdict_view(store, RUN, IT, "m2|0|0")
    assert "Corrected subgoals" in corrected and "Corrected actions" in corrected and "<del" in diff
    assert button["interactive"] is True
    assert verdict_view(store, RUN, IT, "m2|0|0", read_only=True)[4]["interactive"] is False
    assert verdict_view(store, RUN, IT, None)[4]["interactive"] is False
    # a sound plan keeps its subgoals: no empty "Corrected subgoals" block
    m2 = store.frame("verdicts", RUN, IT, task_id="m2").iloc[0].to_dict()
    store.write("verdicts", [{**m2, "corrected_subgoals_json": None}])
    corrected = verdict_view(store, RUN, IT, "m2|0|0")[1]
    assert "Corrected subgoals" not in corrected and "the plan's own subgoals are kept" in corrected


def test_a_refused_action_leaves_no_bare_error_on_the_result_line(tmp_path):
    """gr.Error shows as a toast; Gradio's status tracker would also stamp "Error" over the result line (and leave
    it there above the previous message) unless the event's progress is hidden. The detail event drives the
    *Accept correction* button."""
    from studio.app import build_app

    with Store(tmp_path / "empty.duckdb") as s:
        demo = build_app(s, "examples/demo.toml")
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    writes = ["keep_original", "accept_correction", "drop", "restore", "reviewed", "undo", "save_edit"]
    assert {name: fns[f"critic_{name}"].show_progress for name in writes} == dict.fromkeys(writes, "hidden")
    pair_writes = ["swap", "exclude", "tie", "restore", "choose", "reviewed", "undo"]  # the Pairs tab alike
    assert {name: fns[f"pairs_{name}"].show_progress for name in pair_writes} == dict.fromkeys(pair_writes, "hidden")
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "critic-accept_correction")
    assert button in fns["critic_detail"].outputs


def test_a_missing_curator_name_reads_plainly(tmp_path):
    """The name check's gr.Error is a ValueError: the action handler must not wrap it again ("'Enter…'")."""
    import gradio as gr

    from studio.app import build_app

    with Store(tmp_path / "empty.duckdb") as s:
        demo = build_app(s, "examples/demo.toml")
        drop = next(f for f in demo.fns.values() if f.api_name == "critic_drop").fn
        with pytest.raises(gr.Error) as info:
            drop(RUN, IT, "m1|0|0", "", "", None)
    assert info.value.message.startswith("Enter your curator name")


def test_a_verdict_status_line_names_it_as_the_picker_does(store):
    """Status lines say which verdict by question, plan and status (the picker's label), never by its task|step|k key;
    the table puts the short columns before the question's capped column."""
    from studio.tab_critic import COLUMNS, WIDTHS, verdict_action, verdict_label, verdict_table

    line = verdict_action(store, RUN, IT, "m2|0|0", "keep_original", "ann")
    question = store.get_task(RUN, "m2").question
    assert "m2|0|0" not in line and f"“{verdict_label(question, 'm2|0|0', 'corrected')}” by ann" in line
    assert line.startswith("“Accept original” recorded for") and "keep_original" not in line  # the button's words
    df, _ = verdict_table(store, RUN, IT)
    assert list(df.columns) == COLUMNS and COLUMNS[0] == "key" and COLUMNS[-1] == "question"
    assert len(WIDTHS) == len(COLUMNS)


def test_a_saved_edit_is_what_the_verdict_shows_and_the_next_edit_starts_from(store):
    """After *Save edit* the view showed the critic's correction (and refilled the editor with it) while saying
    "Curator: edit by ann": the curator's actions, which are what trains, looked lost."""
    from studio.critic_queue import verdict_view
    from studio.tab_critic import save_edit

    build_world(store)
    _, corrected_before, _, start, _ = verdict_view(store, RUN, IT, "m2|0|0")
    critic = store.frame("verdicts", RUN, IT, task_id="m2")["corrected_actions"].iloc[0]
    assert critic and critic in corrected_before and start == critic
    mine = "R1 = Calculator(10-4); R2 = Calculator(R1*2)"
    saved = save_edit(store, RUN, IT, "m2|0|0", mine, "ann")
    assert saved.startswith("Edit saved for “What is 10 minus 4, doubled?") and "by ann (override #" in saved
    assert "m2|0|0" not in saved  # named as the picker names it, not by its key
    original, corrected, diff, start, _ = verdict_view(store, RUN, IT, "m2|0|0")
    assert "edit</b> by ann" in original
    assert corrected.index("Curator's actions") < corrected.index("Calculator(R1*2)")
    assert "The critic's correction, replaced by this edit" in corrected  # still there, folded away
    assert start == mine and "the curator's actions" in diff and "R1*2" in diff
    # undone, the critic's correction is what shows (and trains) again
    review_trail.undo_last(store, RUN, IT, "ann", "verdict")
    assert verdict_view(store, RUN, IT, "m2|0|0")[3] == critic


def test_a_saved_edit_names_the_override_it_wrote_while_another_session_writes(store, monkeypatch):
    """*Save edit* named its override by reading the newest of this curator's rows on the verdict back after the
    write: the same curator's other browser tab deciding the verdict in between took its number. It now names the
    row the edit wrote (``engine.verdict_curation.SavedEdit.override_id``)."""
    from studio.tab_critic import save_edit

    append = store.add_override

    def and_the_other_tab_right_after(row: dict) -> int:
        written = append(row)
        if row["action"] == "edit":
            append({**row, "action": "drop", "after_json": None})
        return written

    monkeypatch.setattr(store, "add_override", and_the_other_tab_right_after)
    line = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(10-4)", "ann")
    rows = store.frame("overrides", RUN, IT, target="verdict")
    edit, drop = (int(rows.loc[rows["action"] == a, "override_id"].iloc[0]) for a in ("edit", "drop"))
    assert f"by ann (override #{edit})." in line and f"#{drop}" not in line


def test_a_queue_of_an_iteration_whose_training_is_done_says_so(store):
    """The studio picks the newest trained iteration by default; curating it changed data no stage would read again,
    and nothing said so. The Pairs and Critic info lines now do, each for its own training stage."""
    from studio.queue_lines import trained_line

    build_world(store)
    assert trained_line(store, RUN, IT, "pair") == trained_line(store, RUN, IT, "verdict") == ""
    store.set_stage(RUN, IT, "train_planner", "done")
    line = trained_line(store, RUN, IT, "pair")
    assert f"Iteration {IT}'s planner has trained on these pairs already" in line and "train_planner done" in line
    assert trained_line(store, RUN, IT, "verdict") == ""  # the grounder has not trained yet
    store.set_stage(RUN, IT, "train_grounder", "done")
    line = trained_line(store, RUN, IT, "verdict")
    assert f"Iteration {IT}'s grounder has trained on these verdicts already" in line
    assert trained_line(store, RUN, None, "pair") == trained_line(None, None, IT, "pair") == ""


# -- 5. an iterative step: run after its gold history, named by its step ---------------------------------------------


def test_an_iterative_step_is_edited_run_and_named_as_a_step(store):
    """Each iterative step numbers its plans from k=0 and reads R1.. from the gold steps before it: an edit (and its
    preview) runs after that history, as the ground stage ran the grounding, and every sentence names the step."""
    from studio.tab_critic import agreement_markdown, preview_edit, undo_message, verdict_view

    add_iterative_step(store, 2)
    assert "runs cleanly** · answer: `17`" in preview_edit(store, RUN, "m1|2|0", "R2 = Calculator(R1+5)")
    result = verdict_curation.edit_correction(store, RUN, IT, "m1", 2, 0, "R2 = Calculator(R1+5)",
                                              curator="ann").preview
    assert result.ok and result.values["R2"] == "17"  # alone, R1 was undefined: "execution error"
    assert "Overruled the critic (1):** step 2, plan 0 of m1" in agreement_markdown(store, RUN, IT)
    assert undo_message(store, RUN, IT, "ann").startswith("Undid your edit of step 2, plan 0 for")
    original, corrected, *_ = verdict_view(store, RUN, IT, "m1|2|0")
    assert "step 2, after the gold subgoals and actions of step 1" in original
    assert "2. Add 5." in original  # the step's subgoal carries the step's number
