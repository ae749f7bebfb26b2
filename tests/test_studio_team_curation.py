"""Two or three curators on one iteration at once: what one does must not change, unseen, the item another reads or
has decided on, and a decision made while the iteration's training already runs must say it misses that training.

Engine-level where the defect is the engine's (``engine.review_trail.undo_last``), handler-level (the studio's
functions called as the page's events call them, no browser) where it is the studio's. The world is
``tests._store_world``'s three-task iteration.
"""

from __future__ import annotations

import gradio as gr
import pytest

from engine import curation, review_trail, verdict_curation
from engine.review_trail import UndoRefused
from tests._store_world import IT, RUN, world_store


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def _ctx(store):
    from studio.common import Ctx

    return Ctx(store=store, jobs=None, read_only=False, spaces=False, run=None, iteration=None, curator=None)


def _live(store, target: str = "pair") -> list[tuple[str, str]]:
    """The live (not undone) rows of the log: (action, curator), oldest first."""
    from engine.views import LIVE_OVERRIDE

    rows = store.query(f"SELECT action, curator FROM overrides o WHERE o.target IN (?, ?) AND {LIVE_OVERRIDE} "
                       "ORDER BY override_id", [target, f"{target}_review"])
    return list(zip(rows["action"], rows["curator"]))


# -- undo never changes an item under another curator's later decision or review ------------------------------------


def test_undo_is_refused_once_another_curator_has_acted_on_the_item_since(store):
    """ana swaps m1, ben looks at the swapped pair and marks it "looks right"; ana's ``u`` took the swap back, and
    ben's "looks right" then stood for the unswapped pair he never saw (the table said "looks right · ben"). Now the
    undo is refused, naming ben, and nothing is written; once ben's row is gone (his own undo), ana's undo works."""
    curation.swap_pair(store, RUN, IT, "m1", curator="ana")
    review_trail.mark_reviewed(store, RUN, IT, "pair", "m1", 0, 0, curator="ben")
    with pytest.raises(UndoRefused, match=r"ben has acted on the pair of your swap since \(looks right\)"):
        review_trail.undo_last(store, RUN, IT, "ana", "pair")
    assert _live(store) == [("swap", "ana"), ("reviewed", "ben")]
    assert store.query("SELECT count(*) AS n FROM overrides WHERE action = 'undo'")["n"][0] == 0
    review_trail.undo_last(store, RUN, IT, "ben", "pair")
    assert review_trail.undo_last(store, RUN, IT, "ana", "pair")["action"] == "swap"
    assert not store.effective_pairs(RUN, IT).set_index("task_id").loc["m1", "overridden"]


def test_an_undone_verdict_decision_does_not_move_under_a_later_one(store):
    """The same on verdicts, where it changed the training data: ana drops m1's verdict, ben accepts the original
    over it; ana's undo is refused (ben's decision stands and trains), an item nobody else touched still undoes."""
    verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 0, curator="ana")
    verdict_curation.keep_original(store, RUN, IT, "m1", 0, 0, curator="ben")
    verdict_curation.drop_verdict(store, RUN, IT, "m2", 0, 0, curator="ana")
    # ana's latest is m2's drop, nobody's since: undone
    assert review_trail.undo_last(store, RUN, IT, "ana", "verdict")["task_id"] == "m2"
    with pytest.raises(UndoRefused, match=r"ben has acted on the verdict of your drop since \(accept original\)"):
        review_trail.undo_last(store, RUN, IT, "ana", "verdict")
    records = {r["task_id"]: r["source"] for r in verdict_curation.effective_sft_records(store, RUN, IT)}
    assert records["m1"] == "override:keep_original"


def test_undo_is_refused_on_an_item_another_curator_has_open(store):
    """ana swaps m1 and moves on; ben opens m1 (his lease). ana's ``u`` changed m1 under ben, who was reading it:
    ``check_lease`` refused decisions only. The undo is refused naming ben, and ana keeps the item she has open."""
    from studio import tab_pairs
    from studio.common import claim_note
    from studio.keys import undo_handler

    ctx = _ctx(store)
    undo = undo_handler(ctx, tab_pairs.undo_message)
    curation.swap_pair(store, RUN, IT, "m1", curator="ana")
    claim_note(ctx, "pair", RUN, IT, "m2|0|0", "ana", None)  # ana has moved on to m2
    claim_note(ctx, "pair", RUN, IT, "m1|0|0", "ben", None)  # ben opens m1
    with pytest.raises(gr.Error, match="ben has the pair of your swap open right now"):
        undo(RUN, IT, "ana", None)
    assert _live(store) == [("swap", "ana")]
    assert ctx.leases.taken(("pair", RUN, IT), ["m2|0|0"], "ben") == {"m2|0|0"}  # ana still holds m2
    ctx.leases.release("ben")  # ben moved on
    assert undo(RUN, IT, "ana", None).startswith("Undid your swap of the pair")


# -- a decision made while the iteration's training runs says it misses that training -------------------------------


def test_decisions_while_the_iteration_trains_say_they_miss_that_training(store):
    """train_planner and train_grounder read the effective pairs and SFT records as they start; a team curating
    while *Next stage* trained the iteration got "recorded" and no word that the decision was not in that training
    (the queue's banner spoke only once the stage was done). Now the banner and each decision's line say so, for the
    stage that reads that queue only, and nothing is said once the stage is no longer running."""
    from studio.queue_lines import trained_line
    from studio.tab_critic import save_edit, verdict_action
    from studio.tab_pairs import pair_action

    store.set_stage(RUN, IT, "train_planner", "running")
    banner = trained_line(store, RUN, IT, "pair")
    assert f"Iteration {IT}'s planner is training on these pairs right now** (train_planner running)" in banner
    assert trained_line(store, RUN, IT, "verdict") == ""  # the grounder's training has not read the verdicts
    line = pair_action(store, RUN, IT, "m1|0|0", "swap", "ana")
    assert ", too late for the planner's training under way (train_planner running) (by ana, override #" in line
    assert verdict_action(store, RUN, IT, "m1|0|0", "drop", "ana").endswith(")."), "no clause for the verdicts"
    assert "too late" not in verdict_action(store, RUN, IT, "m1|0|0", "restore", "ana")

    store.set_stage(RUN, IT, "train_planner", "done")
    store.set_stage(RUN, IT, "train_grounder", "running")
    assert "too late" not in pair_action(store, RUN, IT, "m2|0|0", "tie", "ben")  # the done banner says it
    assert "grounder is training on these verdicts right now" in trained_line(store, RUN, IT, "verdict")
    line = verdict_action(store, RUN, IT, "m2|0|0", "keep_original", "ben")
    assert "too late for the grounder's training under way (train_grounder running) (override #" in line
    saved = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(10-4)\nR2 = Calculator(R1*2)", "ben")
    assert "by ben, too late for the grounder's training under way (train_grounder running) (override #" in saved


# -- a curator's decision on a malformed plan's grounding trains ------------------------------------------------------


def test_a_decision_on_a_malformed_plans_grounding_is_what_trains(store):
    """A plan that does not parse has no subgoals; the ground stage grounded it under its raw text. A curator's
    *Accept original* or saved edit of that grounding was recorded ("recorded", "It reaches the gold answer") and gave
    no SFT record: the grounder trained on neither, and the export counted it among "dropped by a curator". Now it
    trains, under the subgoals the grounder was shown, in the effective records and the exported chat alike; the
    critic's own verdict without a decision is left as it was (no record from a plan without subgoals)."""
    from engine.export import sft_rows

    text = "multiply three by four then add five"  # a planner reply read_plan cannot parse: subgoals []
    store.query("UPDATE plans SET text = ?, subgoals_json = '[]' WHERE task_id = 'm1' AND k = 0", [text])
    assert "m1" not in {r["task_id"] for r in verdict_curation.effective_sft_records(store, RUN, IT)}

    verdict_curation.keep_original(store, RUN, IT, "m1", 0, 0, curator="ana")
    (rec,) = [r for r in verdict_curation.effective_sft_records(store, RUN, IT) if r["task_id"] == "m1"]
    assert rec["subgoals"] == [text] and rec["source"] == "override:keep_original"
    verdict_curation.edit_correction(store, RUN, IT, "m1", 0, 0, "R1 = Calculator(3*4)\nR2 = Calculator(R1+5)",
                                     curator="ana")
    (rec,) = [r for r in verdict_curation.effective_sft_records(store, RUN, IT) if r["task_id"] == "m1"]
    assert (rec["subgoals"], rec["source"]) == ([text], "override:edit")
    (row,) = [r for r in sft_rows(store, RUN, IT) if r["task_id"] == "m1"]
    assert text in row["messages"][-2]["content"] and row["messages"][-1]["content"].startswith("R1 = Calculator(3*4)")


def test_saving_an_edit_of_a_verdict_gone_meanwhile_is_a_line_not_a_traceback(store):
    """``step critique --retry-errors`` deletes error verdicts while a curator may have one open; *Save edit* then hit
    the engine's "no verdict" refusal unwrapped: Gradio's bare "Error" and a traceback in the server log, where every
    other decision shows the refusal as a line (``user_errors``)."""
    from gradio.utils import error_payload

    from tests._store_world import studio_fns

    save = studio_fns(store)["critic_save_edit"].fn
    store.query("DELETE FROM verdicts WHERE task_id = 'm2'")
    with pytest.raises(gr.Error) as err:
        save(RUN, IT, "m2|0|0", "R1 = Calculator(10-4)", "ana", "", None)
    assert error_payload(err.value, False)["error"].startswith("no verdict for task 'm2'")
    assert not err.value.print_exception
    assert store.query("SELECT count(*) AS n FROM overrides")["n"][0] == 0
