"""What a curator reads about a decision, from a browser audit of the Pairs and Critic tabs:

1. the verdict's view gives the gold answer and what the original grounding and the critic's correction (or the
   curator's edit) reach when executed, each right or wrong, so *Accept original* vs *Accept correction* needs no
   arithmetic (the correction executed once per verdict, not at every redraw);
2. a "looks right" leaves a trace: who said it, in the table's action/curator columns and in the detail;
3. a later curator's decision names the one it replaced, in the action's status line and in the detail;
4. *Save edit* of actions that parse but do not run says plainly that they were saved and do not run.

Handlers are called directly on the hand-made store of ``tests/_store_world.py`` (no models): m1 accepted (its
grounding reaches 17), m2 corrected (the grounding reaches 14, the correction the gold 12), q1 unfixable (the
grounding calls an unknown tool).
"""

from __future__ import annotations

import pytest

from engine import curation, review_trail
from engine.store import Store
from tests._store_world import IT, RUN, add_iterative_step, world_store


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def _original(store: Store, key: str) -> str:
    from studio.critic_queue import verdict_view

    return verdict_view(store, RUN, IT, key)[0]


# -- 1. the gold answer and what each side reaches ---------------------------------------------------------------


def test_the_verdict_view_shows_the_gold_answer_and_what_original_and_correction_reach(store):
    """The detail said "Critic says answer '14' != gold …" and the curator redid the arithmetic to choose."""
    m2 = _original(store, "m2|0|0")
    assert "Gold answer: <b>12</b>" in m2
    assert "grounded actions → answer <b>14</b> · ✗ not the gold answer (12)" in m2
    assert "the critic's correction → answer <b>12</b> · ✓ the gold answer" in m2
    m1 = _original(store, "m1|0|0")  # accepted: no correction to run
    assert "Gold answer: <b>17</b> · grounded actions → answer <b>17</b> · ✓ the gold answer</p>" in m1
    q1 = _original(store, "q1|0|0")  # a grounding that failed: no answer, said so
    assert "Gold answer: <b>London</b> · grounded actions → does not run" in q1 and "nan" not in q1


def test_the_original_grounding_reads_as_the_ground_stage_stored_it(store):
    """The original's outcome is the stored grounding's (what the table's "runs"/"correct" columns read), not a
    second execution that could differ (a QA model answers anew)."""
    m2 = store.frame("groundings", RUN, IT, task_id="m2").iloc[0].to_dict()
    store.write("groundings", [{**m2, "answer": "13", "correct": False}])
    assert "grounded actions → answer <b>13</b> · ✗ not the gold answer (12)" in _original(store, "m2|0|0")
    q1 = store.frame("groundings", RUN, IT, task_id="q1").iloc[0].to_dict()
    store.write("groundings", [{**q1, "error": "R1 = Ask(someone): unknown tool Ask"}])
    assert "does not run: R1 = Ask(someone): unknown tool Ask (no answer)" in _original(store, "q1|0|0")


def test_an_iterative_step_is_judged_against_the_gold_steps_result(store):
    add_iterative_step(store)  # m1 step 2: grounded R2 = R1+4 (16), corrected to R2 = R1+5 (17)
    step = _original(store, "m1|2|0")
    assert "Gold result of step 2: <b>17</b>" in step
    assert "grounded actions → answer <b>16</b> · ✗" in step
    assert "the critic's correction → answer <b>17</b> · ✓ the gold answer" in step


def test_the_correction_is_executed_once_per_verdict_not_at_every_redraw(store, monkeypatch):
    """The view is drawn at every pick, walk and action; a QA tool may call a model each time it runs."""
    from studio import critic_queue

    runs = []
    judge = critic_queue.judge

    def counting(*args, **kwargs):
        runs.append(args[2])
        return judge(*args, **kwargs)

    monkeypatch.setattr(critic_queue, "judge", counting)
    for _ in range(3):
        assert "answer <b>12</b> · ✓" in _original(store, "m2|0|0")
    assert runs.count("R1 = Calculator(10-4); R2 = Calculator(R1*2)") <= 1


def test_the_curators_edit_is_what_the_view_executes_and_judges(store):
    from studio.tab_critic import save_edit

    save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(2 +)", "ann")
    view = _original(store, "m2|0|0")
    assert "the curator's edit → does not run: R1 = Calculator(2 +): cannot parse formula" in view
    assert "the critic's correction →" not in view  # the edit is what trains now


# -- 2. "looks right" leaves a trace -----------------------------------------------------------------------------


def test_looks_right_on_a_pair_shows_who_in_the_table_and_the_detail(store):
    """After ``y`` the counter said "reviewed 1 by you" but the row's action/curator columns stayed blank and the
    detail said only "· in training"."""
    from studio.pairs_queue import pair_detail, pairs_table
    from studio.tab_pairs import pair_action

    pair_action(store, RUN, IT, "m2|0|0", "reviewed", "ana")
    df = pairs_table(store, RUN, IT)[0].set_index("key")
    assert (df.loc["m2|0|0", "override_action"], df.loc["m2|0|0", "curator"]) == ("looks right", "ana")
    assert df["override_action"].isna()[["m1|0|0", "q1|0|0"]].all()  # the others stay blank
    assert "· in training · looked right by ana</p>" in pair_detail(store, RUN, IT, "m2|0|0")[0]
    # a review is not a decision: the store's "overridden" filter still leaves it out
    assert pairs_table(store, RUN, IT, overridden="yes")[1] == 0
    # after a decision, the decision shows in the table; the detail says who looked at it afterwards
    curation.swap_pair(store, RUN, IT, "m2", curator="ben")
    pair_action(store, RUN, IT, "m2|0|0", "reviewed", "cy")
    row = pairs_table(store, RUN, IT)[0].set_index("key").loc["m2|0|0"]
    assert (row["override_action"], row["curator"]) == ("swap", "ben")
    assert "· in training · swap by ben, looked right by cy</p>" in pair_detail(store, RUN, IT, "m2|0|0")[0]


def test_looks_right_on_a_verdict_shows_who_in_the_table_and_the_detail(store):
    from studio.tab_critic import verdict_action, verdict_table

    verdict_action(store, RUN, IT, "m1|0|0", "reviewed", "ana")
    df = verdict_table(store, RUN, IT)[0].set_index("key")
    assert (df.loc["m1|0|0", "override_action"], df.loc["m1|0|0", "curator"]) == ("looks right", "ana")
    assert "<p>Curator: <b>looked right</b> by ana</p>" in _original(store, "m1|0|0")
    assert verdict_table(store, RUN, IT, reviewed="yes")[1] == 1  # the review filter counts it, as before


# -- 3. a later decision names the one it replaced ----------------------------------------------------------------


def test_a_pair_decision_names_the_decision_it_replaced(store):
    """ana swapped m1's pair; ben then pressed ``x``: the row read "exclude · ben" and ana's swap was visible only
    in the audit log."""
    from studio.pairs_queue import pair_detail
    from studio.tab_pairs import pair_action

    first = pair_action(store, RUN, IT, "m1|0|0", "swap", "ana")
    assert "replacing" not in first
    line = pair_action(store, RUN, IT, "m1|0|0", "exclude", "ben")
    assert ", replacing ana's swap (by ben, override #" in line and line.endswith(").")
    assert "· excluded by ben (replaced ana's swap)</p>" in pair_detail(store, RUN, IT, "m1|0|0")[0].replace(
        "&#x27;", "'")
    assert ", leaving ben's exclude standing (by cy" in pair_action(store, RUN, IT, "m1|0|0", "reviewed", "cy")
    assert ", taking back ben's exclude (by dee" in pair_action(store, RUN, IT, "m1|0|0", "restore", "dee")
    # a curator changing their own mind hid nothing: no note
    pair_action(store, RUN, IT, "m2|0|0", "swap", "ana")
    assert "replacing" not in pair_action(store, RUN, IT, "m2|0|0", "tie", "ana")
    assert "replaced" not in pair_detail(store, RUN, IT, "m2|0|0")[0]


def test_a_verdict_decision_and_an_edit_name_the_decision_they_replaced(store):
    from studio.tab_critic import save_edit, verdict_action

    verdict_action(store, RUN, IT, "m2|0|0", "drop", "ana")
    line = verdict_action(store, RUN, IT, "m2|0|0", "keep_original", "ben")
    assert "by ben, replacing ana's drop (override #" in line and line.endswith(").")
    assert "<p>Curator: <b>accept original</b> by ben (replaced ana&#x27;s drop)</p>" in _original(store, "m2|0|0")
    saved = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(10-4); R2 = Calculator(R1*2)", "cy")
    assert "by cy, replacing ben's accept original (override #" in saved


def test_replaced_decision_skips_undone_rows_and_restores(store):
    """The engine's rule: the latest live decision before the row; an undone row never counts, and a restore means
    the item was back to the engine's result (nothing replaced)."""
    swap = curation.swap_pair(store, RUN, IT, "m1", curator="ana")
    excl = curation.exclude_pair(store, RUN, IT, "m1", curator="ben")
    assert review_trail.replaced_decision(store, swap) is None
    assert review_trail.replaced_decision(store, excl) == {"override_id": swap, "action": "swap", "curator": "ana"}
    review_trail.undo_last(store, RUN, IT, "ben", "pair")  # ben's exclude undone: ana's swap is live again
    tie = curation.tie_pair(store, RUN, IT, "m1", curator="cy")
    assert review_trail.replaced_decision(store, tie)["override_id"] == swap
    curation.restore_pair(store, RUN, IT, "m1", curator="cy")
    assert review_trail.replaced_decision(store, curation.swap_pair(store, RUN, IT, "m1", curator="dee")) is None
    review = review_trail.mark_reviewed(store, RUN, IT, "pair", "m1", 0, 0, curator="eve")
    assert review_trail.replaced_decision(store, review)["curator"] == "dee"  # the decision a review left standing
    assert review_trail.looked_right(store, RUN, IT, "pair") == {("m1", 0, 0): "eve"}
    assert review_trail.looked_right(store, RUN, IT, "pair", ["m2"]) == {}


# -- 4. Save edit of actions that do not run ----------------------------------------------------------------------


def test_a_saved_edit_that_does_not_run_says_so_plainly(store):
    """``R1 = Calculator(2 +)`` parses as an action line, so it is saved (the engine lets the curator decide), but
    the line read "Edit saved … execution error: … · no answer" where the README says *Save edit* refuses actions
    that do not parse: it now says it was saved, does not run, and what that means for training."""
    from studio.tab_critic import save_edit

    line = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(2 +)", "ann")
    head = line.split("\n\n")[0]
    assert "(override #" in head and "**but it does not run**: R1 = Calculator(2 +): cannot parse formula" in head
    assert "train the grounder on actions that reach no answer" in head and "*Drop*" in head
    rows = store.frame("overrides", RUN, IT, target="verdict")
    assert rows["action"].tolist() == ["edit"]  # saved, as before
    wrong = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(10-4)", "ann")
    assert "It runs, but its answer `6` is not the gold answer `12`" in wrong
    right = save_edit(store, RUN, IT, "m2|0|0", "R1 = Calculator(10-4); R2 = Calculator(R1*2)", "ann")
    assert "It reaches the gold answer `12`." in right


# -- what is not executed for the detail, and what is not kept ----------------------------------------------------


def test_a_tool_failure_while_drawing_a_verdict_is_shown_once_and_not_kept(store, monkeypatch):
    """A QA server briefly unreachable: the view says the correction could not run, and the next view runs it
    again (a failure kept in the cache said "does not run" until the studio restarted)."""
    from studio import critic_queue

    real, calls = critic_queue.judge, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("QA server unreachable")
        return real(*args, **kwargs)

    monkeypatch.setattr(critic_queue, "judge", flaky)
    assert "could not run: QA server unreachable" in _original(store, "m2|0|0")
    assert "the critic's correction → answer <b>12</b> · ✓ the gold answer" in _original(store, "m2|0|0")
    ran = len(calls)
    _original(store, "m2|0|0")
    assert len(calls) == ran  # a success is kept


def test_web_actions_are_said_not_to_be_executed_rather_not_to_run(store):
    """Nothing runs for web actions (``engine.executor``): their answer is always None, which is no wrong answer;
    the detail and *Save edit* say they are not executed here instead of "does not run" / "✗"."""
    from studio.tab_critic import save_edit

    store.query("UPDATE tasks SET domain = 'web' WHERE task_id = 'm2'")
    view = _original(store, "m2|0|0")
    assert view.count("web actions are not executed here") == 2 and "✗" not in view.split("</p>")[0]
    line = save_edit(store, RUN, IT, "m2|0|0", "R1 = CLICK(Submit button)", "ann")
    assert "Web actions are not executed here." in line and "does not run" not in line
    assert store.frame("overrides", RUN, IT, target="verdict")["action"].tolist() == ["edit"]


def test_a_qa_verdict_of_a_run_with_a_remote_qa_model_is_not_executed_on_view(store, monkeypatch):
    """A run whose QA tool calls a model (``tools.qa_model``) would make a call at every first view of a verdict, in
    the key-press path: the detail says it is not run here (*Run edit* runs it) and calls nothing."""
    import json

    from studio import critic_queue

    config = json.loads(store.query("SELECT config_json FROM runs WHERE run_id = ?", [RUN])["config_json"][0])
    config["tools"] = {**config.get("tools", {}), "qa_base_url": "http://127.0.0.1:9/v1", "qa_model": "m"}
    store.query("UPDATE runs SET config_json = ? WHERE run_id = ?", [json.dumps(config), RUN])
    monkeypatch.setattr(critic_queue, "judge", lambda *a, **k: pytest.fail("executed a remote QA tool on view"))
    gold, outcome = critic_queue.gold_and_outcome(store, RUN, "q1", 0, "R1 = QA([Ada Lovelace], where born?)")
    assert outcome is not None and outcome.not_run and "tools.qa_model" in outcome.not_run
    assert "tools.qa_model" in critic_queue.outcome_words(outcome, gold)
    # a maths verdict of the same run still runs locally
    monkeypatch.setattr(critic_queue, "judge", lambda *a, **k: ({"answer": "12", "error": None}, True))
    assert critic_queue.gold_and_outcome(store, RUN, "m2", 0, "R1 = Calculator(6*2)")[1].correct
