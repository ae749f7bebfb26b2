"""Curation: pair and verdict overrides change the effective training data, survive rebuilt auto pairs, validate
their input, and the curator/critic agreement numbers add up."""

from __future__ import annotations

import pandas as pd
import pytest

from engine import curation
from engine.export import pair_rows
from engine.store import Store
from tests._store_world import IT, RUN, auto_pair_rows, build_world


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        yield s


def pair(store: Store, task_id: str) -> dict:
    df = curation.effective_pairs(store, RUN, IT)
    return df[df["task_id"] == task_id].iloc[0].to_dict()


def exported(store: Store) -> dict[str, tuple[str, str]]:
    return {r["task_id"]: (r["chosen"], r["rejected"]) for r in pair_rows(store, RUN, IT)}


def test_auto_pairs_pass_through(store):
    m1 = pair(store, "m1")
    assert (m1["chosen_k"], m1["rejected_k"], m1["margin"]) == (0, 3, 1.5)
    assert not m1["overridden"] and not m1["excluded"] and not m1["tie"]
    assert set(exported(store)) == {"m1", "m2", "q1"}


def test_swap_flips_pair_and_export_and_swapping_back_restores(store):
    before = exported(store)["m1"]
    curation.swap_pair(store, RUN, IT, "m1", 0, curator="ann", reason="worse plan won")
    m1 = pair(store, "m1")
    assert (m1["chosen_k"], m1["rejected_k"]) == (3, 0)
    assert (m1["chosen_logppl"], m1["rejected_logppl"], m1["margin"]) == (2.0, 0.5, -1.5)
    assert m1["overridden"] and m1["override_action"] == "swap" and m1["curator"] == "ann"
    assert exported(store)["m1"] == before[::-1]
    curation.swap_pair(store, RUN, IT, "m1", 0)
    assert pair(store, "m1")["chosen_k"] == 0 and not pair(store, "m1")["overridden"]
    log = store.frame("overrides", RUN, IT, target="pair")
    assert log["action"].tolist() == ["swap", "restore"]  # append-only history
    assert '"chosen_k": 0' in log["before_json"][0] and '"chosen_k": 3' in log["after_json"][0]


def test_exclude_and_tie_keep_row_but_leave_training(store):
    curation.exclude_pair(store, RUN, IT, "m1", 0, reason="both bad")
    curation.tie_pair(store, RUN, IT, "m2", 0)
    m1, m2 = pair(store, "m1"), pair(store, "m2")
    assert m1["excluded"] and not m1["tie"] and m2["tie"] and not m2["excluded"]
    assert len(curation.effective_pairs(store, RUN, IT)) == 3
    assert set(exported(store)) == {"q1"}
    assert store.pairs_page(RUN, IT, excluded=True)["task_id"].tolist() == ["m1"]
    assert store.pairs_page(RUN, IT, ties=True)["task_id"].tolist() == ["m2"]
    assert store.pairs_page(RUN, IT, overridden=False)["task_id"].tolist() == ["q1"]
    assert not store.task_plans(RUN, IT, "m1")["in_training"].any()
    curation.restore_pair(store, RUN, IT, "m1", 0)
    assert set(exported(store)) == {"m1", "q1"}


def test_choose_any_two_plans_uses_scores(store):
    curation.choose_pair(store, RUN, IT, "m1", 0, chosen_k=1, rejected_k=3, reason="k1 is closer")
    m1 = pair(store, "m1")
    assert (m1["chosen_k"], m1["rejected_k"], m1["chosen_logppl"], m1["rejected_logppl"]) == (1, 3, 1.5, 2.0)
    assert m1["override_action"] == "choose" and m1["auto_chosen_k"] == 0
    assert exported(store)["m1"] == ("Subgoal 1: Add 3 and 4.", "Subgoal 1: Guess.")
    flags = store.task_plans(RUN, IT, "m1").set_index("k")
    assert flags.loc[1, "chosen"] and flags.loc[3, "rejected"] and not flags.loc[0, "chosen"]
    curation.swap_pair(store, RUN, IT, "m1", 0)  # flipping a choice stays a choice
    m1 = pair(store, "m1")
    assert (m1["chosen_k"], m1["rejected_k"], m1["override_action"]) == (3, 1, "choose")


def test_choose_validation(store):
    with pytest.raises(ValueError, match="different plans"):
        curation.choose_pair(store, RUN, IT, "m1", 0, 1, 1)
    with pytest.raises(ValueError, match="no plan k=9"):
        curation.choose_pair(store, RUN, IT, "m1", 0, 1, 9)
    with pytest.raises(ValueError, match="same text"):
        curation.choose_pair(store, RUN, IT, "m1", 0, 0, 2)
    store.delete("scores", RUN, IT, task_id="m1", k=1)
    with pytest.raises(ValueError, match="no score"):
        curation.choose_pair(store, RUN, IT, "m1", 0, 1, 3)
    with pytest.raises(ValueError, match="no pair"):
        curation.swap_pair(store, RUN, IT, "nope", 0)
    assert store.count("overrides", RUN) == 0


def test_overrides_survive_rebuilding_auto_pairs(store):
    curation.swap_pair(store, RUN, IT, "m1", 0)
    curation.exclude_pair(store, RUN, IT, "m2", 0)
    # The pairs stage deletes its rows and writes them again (same rule, same result).
    store.write_batch([("pairs", auto_pair_rows())], deletes=[("pairs", {"run_id": RUN, "iteration": IT})])
    assert (pair(store, "m1")["chosen_k"], pair(store, "m1")["rejected_k"]) == (3, 0)
    assert pair(store, "m2")["excluded"]
    # A choice even survives the rule no longer pairing the task at all.
    curation.choose_pair(store, RUN, IT, "q1", 0, 1, 0)
    store.delete("pairs", RUN, IT, task_id="q1")
    q1 = pair(store, "q1")
    assert (q1["chosen_k"], q1["rejected_k"], q1["rule"]) == (1, 0, "manual")
    assert pd.isna(q1["auto_chosen_k"])  # no auto pair any more
    assert exported(store)["q1"] == ("Subgoal 1: Ask someone.", "Subgoal 1: Find where Ada Lovelace was born.")


def sft(store: Store) -> dict[str, dict]:
    return {r["task_id"]: r for r in curation.effective_sft_records(store, RUN, IT)}


def test_sft_records_follow_critic_status(store):
    records = sft(store)
    assert set(records) == {"m1", "m2"}  # q1 unfixable -> nothing
    assert records["m1"] == {
        "task_id": "m1",
        "step": 0,
        "k": 0,
        "subgoals": ["Multiply 3 by 4.", "Add 5."],
        "actions": "R1 = Calculator(3*4); R2 = Calculator(R1+5)",
        "source": "accepted",
    }
    assert records["m2"]["source"] == "corrected"
    assert records["m2"]["subgoals"] == ["Subtract 4 from 10.", "Double it."]  # corrected subgoals win
    assert records["m2"]["actions"] == "R1 = Calculator(10-4); R2 = Calculator(R1*2)"


def test_verdict_overrides_change_sft_records(store):
    curation.keep_original(store, RUN, IT, "m2", 0, 0, curator="bo", reason="the critic is wrong")
    assert sft(store)["m2"]["actions"] == "R1 = Calculator(10+4)"
    assert sft(store)["m2"]["subgoals"] == ["Subtract 4 from 10."]  # the judged plan's own subgoals
    assert sft(store)["m2"]["source"] == "override:keep_original"
    curation.accept_correction(store, RUN, IT, "m2", 0, 0)
    assert sft(store)["m2"]["source"] == "override:accept"
    curation.drop_verdict(store, RUN, IT, "m1", 0, 0)
    assert "m1" not in sft(store)
    curation.restore_verdict(store, RUN, IT, "m1", 0, 0)
    assert sft(store)["m1"]["source"] == "accepted"
    with pytest.raises(ValueError, match="no correction"):
        curation.accept_correction(store, RUN, IT, "m1", 0, 0)
    with pytest.raises(ValueError, match="no verdict"):
        curation.drop_verdict(store, RUN, IT, "m1", 0, 5)
    queue = store.verdict_queue(RUN, IT, overridden=True)
    assert queue["task_id"].tolist() == ["m2"] and queue["override_action"][0] == "accept_correction"


def test_edit_with_invalid_actions_raises_parse_error(store):
    with pytest.raises(curation.InvalidActionsError, match="invalid actions") as info:
        curation.edit_correction(store, RUN, IT, "q1", 0, 0, "R1 = Calculator(3*(4+5)")
    assert info.value.parse_error.snippet  # message, span and snippet for the editor
    assert isinstance(info.value, ValueError)
    assert store.count("overrides", RUN) == 0


def test_edit_previews_values_and_feeds_sft(store):
    result = curation.edit_correction(
        store,
        RUN,
        IT,
        "q1",
        0,
        0,
        "R1 = Calculator(6*7); R2 = Calculator(R1-2)",
        subgoals=["Multiply.", "Subtract."],
        reason="hand-fixed",
    )
    assert result.ok and result.values == {"R1": "42", "R2": "40"} and result.answer == "40"
    record = sft(store)["q1"]
    assert record["source"] == "override:edit" and record["actions"] == "R1 = Calculator(6*7); R2 = Calculator(R1-2)"
    assert record["subgoals"] == ["Multiply.", "Subtract."]
    stored = store.frame("overrides", RUN, IT, target="verdict")
    assert '"answer": "40"' in stored["after_json"][0]  # the preview is kept with the edit


def test_agreement_numbers(store):
    assert curation.agreement(store, RUN, IT) == {
        "verdicts": 3,
        "reviewed": 0,
        "agreed": 0,
        "disagreed": 0,
        "rate": None,
        "by_action": {},
        "by_status": {},
    }
    curation.keep_original(store, RUN, IT, "m1", 0, 0)  # accepted + keep -> agree
    curation.edit_correction(store, RUN, IT, "m2", 0, 0, "R1 = Calculator(10-4)")  # corrected + edit -> disagree
    curation.drop_verdict(store, RUN, IT, "q1", 0, 0)  # unfixable + drop -> agree
    a = curation.agreement(store, RUN)
    assert (a["reviewed"], a["agreed"], a["disagreed"]) == (3, 2, 1)
    assert a["rate"] == pytest.approx(2 / 3)
    assert a["by_action"] == {"keep_original": 1, "edit": 1, "drop": 1}
    assert a["by_status"]["corrected"] == {"reviewed": 1, "agreed": 0}
    curation.drop_verdict(store, RUN, IT, "m1", 0, 0)  # the latest decision counts: now a disagreement
    curation.restore_verdict(store, RUN, IT, "m2", 0, 0)  # restored -> no longer reviewed
    a = curation.agreement(store, RUN, IT)
    assert (a["reviewed"], a["agreed"], a["disagreed"], a["rate"]) == (2, 1, 1, 0.5)
    assert curation.agreement(store, RUN, 7)["verdicts"] == 0
