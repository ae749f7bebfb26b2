"""Curation: pair and verdict overrides change the effective training data, survive rebuilt auto pairs, validate
their input, and the curator/critic agreement numbers add up. Overrides are never lost: an acknowledged one survives
a SIGKILL right after the acknowledgement and the restart, re-runs of the pairs and critique stages, and a schema
migration of a v1 store."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from engine import curation, review_trail, schema, verdict_curation
from engine.agreement import agreement
from engine.dbutil import TABLES
from engine.export import pair_rows
from engine.store import Store
from tests._store_world import IT, PLAN_TEXTS, RUN, auto_pair_rows, build_world, world_store


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


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
    ks = sorted(store.task_plans(RUN, IT, "m1")["k"].astype(int))
    with pytest.raises(ValueError, match=rf"no plan k=9 in iteration {IT} \(its plans are k={ks[0]}-{ks[-1]}\)"):
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
    return {r["task_id"]: r for r in verdict_curation.effective_sft_records(store, RUN, IT)}


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
    verdict_curation.keep_original(store, RUN, IT, "m2", 0, 0, curator="bo", reason="the critic is wrong")
    assert sft(store)["m2"]["actions"] == "R1 = Calculator(10+4)"
    assert sft(store)["m2"]["subgoals"] == ["Subtract 4 from 10."]  # the judged plan's own subgoals
    assert sft(store)["m2"]["source"] == "override:keep_original"
    verdict_curation.accept_correction(store, RUN, IT, "m2", 0, 0)
    assert sft(store)["m2"]["source"] == "override:accept"
    verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 0)
    assert "m1" not in sft(store)
    verdict_curation.restore_verdict(store, RUN, IT, "m1", 0, 0)
    assert sft(store)["m1"]["source"] == "accepted"
    with pytest.raises(ValueError, match="no correction"):
        verdict_curation.accept_correction(store, RUN, IT, "m1", 0, 0)
    with pytest.raises(ValueError, match="no verdict"):
        verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 5)
    queue = store.verdict_queue(RUN, IT, overridden=True)
    assert queue["task_id"].tolist() == ["m2"] and queue["override_action"][0] == "accept_correction"


def test_edit_with_invalid_actions_raises_parse_error(store):
    with pytest.raises(verdict_curation.InvalidActionsError, match="invalid actions") as info:
        verdict_curation.edit_correction(store, RUN, IT, "q1", 0, 0, "R1 = Calculator(3*(4+5)")
    assert info.value.parse_error.snippet  # message, span and snippet for the editor
    assert isinstance(info.value, ValueError)
    assert store.count("overrides", RUN) == 0


def test_edit_previews_values_and_feeds_sft(store):
    saved = verdict_curation.edit_correction(
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
    result = saved.preview
    assert result.ok and result.values == {"R1": "42", "R2": "40"} and result.answer == "40"
    record = sft(store)["q1"]
    assert record["source"] == "override:edit" and record["actions"] == "R1 = Calculator(6*7); R2 = Calculator(R1-2)"
    assert record["subgoals"] == ["Multiply.", "Subtract."]
    stored = store.frame("overrides", RUN, IT, target="verdict")
    assert '"answer": "40"' in stored["after_json"][0]  # the preview is kept with the edit
    assert saved.override_id == int(stored["override_id"][0]) and stored["action"][0] == "edit"  # the row it wrote


def test_an_edit_gives_back_the_override_it_wrote_while_others_write(store, monkeypatch):
    """The studio named a saved edit by reading ``max(override_id)`` back afterwards: a row another session appended
    in between took its name. ``edit_correction`` now gives back the id of its own row."""
    append = store.add_override

    def and_another_session_right_after(row: dict) -> int:
        written = append(row)
        if row["action"] == "edit":  # the same curator's other browser tab drops the verdict right after
            append({**row, "action": "drop", "after_json": None})
        return written

    monkeypatch.setattr(store, "add_override", and_another_session_right_after)
    saved = verdict_curation.edit_correction(store, RUN, IT, "m2", 0, 0, "R1 = Calculator(10-4)", curator="bo")
    rows = store.frame("overrides", RUN, IT, target="verdict").set_index("override_id")["action"]
    assert rows[saved.override_id] == "edit" and rows.index.max() != saved.override_id
    with pytest.raises(AttributeError):  # frozen: the record of a write is not edited afterwards
        saved.override_id = 0


def test_agreement_numbers(store):
    assert agreement(store, RUN, IT) == {
        "verdicts": 3,
        "reviewed": 0,
        "agreed": 0,
        "disagreed": 0,
        "rate": None,
        "by_action": {},
        "by_status": {},
        "by_domain": {},
        "by_tool": {},
        "by_curator": {},
        "disagreements": [],
    }
    verdict_curation.keep_original(store, RUN, IT, "m1", 0, 0, curator="ann")  # accepted + keep -> agree
    # corrected + edit
    verdict_curation.edit_correction(store, RUN, IT, "m2", 0, 0, "R1 = Calculator(10-4)", curator="bo")
    verdict_curation.drop_verdict(store, RUN, IT, "q1", 0, 0, curator="ann")  # unfixable + drop -> agree
    a = agreement(store, RUN)
    assert (a["reviewed"], a["agreed"], a["disagreed"]) == (3, 2, 1)
    assert a["rate"] == pytest.approx(2 / 3)
    assert a["by_action"] == {"keep_original": {"reviewed": 1, "agreed": 1}, "edit": {"reviewed": 1, "agreed": 0},
                              "drop": {"reviewed": 1, "agreed": 1}}
    assert a["by_status"]["corrected"] == {"reviewed": 1, "agreed": 0}
    assert a["by_domain"] == {"maths": {"reviewed": 2, "agreed": 1}, "qa": {"reviewed": 1, "agreed": 1}}
    # per tool the grounding calls (m1 calls Calculator twice: it counts once)
    assert a["by_tool"] == {"Calculator": {"reviewed": 2, "agreed": 1}, "Ask": {"reviewed": 1, "agreed": 1}}
    assert a["by_curator"] == {"ann": {"reviewed": 2, "agreed": 2}, "bo": {"reviewed": 1, "agreed": 0}}
    assert a["disagreements"] == [{"task_id": "m2", "step": 0, "k": 0, "domain": "maths", "status": "corrected",
                                   "action": "edit", "tools": ["Calculator"]}]
    # the critic queue's "overruled" filter is the same rule, in SQL: the disagreements, one click away
    assert store.verdict_queue(RUN, IT, overruled=True)["task_id"].tolist() == ["m2"]
    assert store.verdict_queue(RUN, IT, overruled=False)["task_id"].tolist() == ["m1", "q1"]
    verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 0)  # the latest decision counts: now a disagreement
    verdict_curation.restore_verdict(store, RUN, IT, "m2", 0, 0)  # restored -> no longer reviewed
    a = agreement(store, RUN, IT)
    assert (a["reviewed"], a["agreed"], a["disagreed"], a["rate"]) == (2, 1, 1, 0.5)
    assert store.verdict_queue(RUN, IT, overruled=True)["task_id"].tolist() == ["m1"]
    assert agreement(store, RUN, 7)["verdicts"] == 0


# -- overrides are never lost -----------------------------------------------------------------------------------------

EDITED = "R1 = Calculator(10-4); R2 = Calculator(R1*2)"


def _curate(store: Store) -> list[int]:
    """A curator's session: a swapped and an excluded pair, a dropped and an edited verdict; the override ids."""
    ids = [curation.swap_pair(store, RUN, IT, "m1", 0, curator="ann"),
           curation.exclude_pair(store, RUN, IT, "m2", 0, curator="ann"),
           verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 0, curator="bo")]
    edit = verdict_curation.edit_correction(store, RUN, IT, "m2", 0, 0, EDITED, subgoals=["Subtract.", "Double."],
                                    curator="bo")
    return ids + [edit.override_id]


def _effect(store: Store, tasks: tuple[str, ...] = ("m1", "m2", "q1")) -> tuple:
    """What the overrides decide: the exported pairs and the grounder's SFT records (of ``tasks``)."""
    records = {t: r for t, r in sft(store).items() if t in tasks}
    return {t: p for t, p in exported(store).items() if t in tasks}, records


def _expect_curated(effect: tuple) -> None:
    pairs, records = effect
    assert "m2" not in pairs and pairs["m1"] == (PLAN_TEXTS["m1"][3], PLAN_TEXTS["m1"][0])  # excluded; swapped
    assert "m1" not in records  # dropped
    assert records["m2"]["actions"] == EDITED and records["m2"]["source"] == "override:edit"


def test_an_acknowledged_override_is_in_the_store_when_the_process_is_killed(tmp_path):
    """The ack a curator sees (a returned override id) comes after the commit: SIGKILL right after it loses
    nothing, and the reopened store (a restart) applies every override."""
    path = tmp_path / "ws.duckdb"
    with Store(path) as s:
        build_world(s)
    code = ("import json, os, signal, sys\nfrom engine.store import Store\nfrom tests.test_curation import _curate\n"
            "ids = _curate(Store(sys.argv[1]))\nprint(json.dumps(ids), flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    acknowledged = json.loads(out.stdout.strip().splitlines()[-1])
    with Store(path) as s:
        assert s.frame("overrides", RUN)["override_id"].tolist() == acknowledged
        _expect_curated(_effect(s))


def test_overrides_survive_rerunning_the_pairs_and_critique_stages(tmp_path):
    from engine.loop import run_stage  # torch and the stages: only this test needs them

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        _curate(s)
        curated = _effect(s)
        _expect_curated(curated)
        assert run_stage(s, RUN, IT, "pairs") == "done"  # rebuilds the auto pairs in place
        assert run_stage(s, RUN, IT, "critique") == "done"  # keeps the stored verdicts
        assert _effect(s) == curated
        # A critique from scratch (new verdict rows from the reference critic): the overrides still decide m1, m2.
        s.delete("verdicts", RUN, IT)
        assert run_stage(s, RUN, IT, "critique") == "done" and s.count("verdicts", RUN, IT) == 3
        assert _effect(s, ("m1", "m2")) == _effect_of(curated, ("m1", "m2"))


def _effect_of(effect: tuple, tasks: tuple[str, ...]) -> tuple:
    return tuple({t: v for t, v in part.items() if t in tasks} for part in effect)


def test_a_version_1_store_with_overrides_migrates_with_them_intact(tmp_path):
    """A v1 file made with the old DDL and holding a curated iteration opens migrated, overrides and all."""
    current, old = tmp_path / "current.duckdb", tmp_path / "v1.duckdb"
    with Store(current) as s:
        build_world(s)
        _curate(s)
        curated, overrides = _effect(s), s.frame("overrides", RUN)
    con = duckdb.connect(str(old))
    con.execute(schema.DDL_V1)
    con.execute("INSERT INTO schema_info VALUES (1)")
    con.execute(f"ATTACH '{current}' AS cur (READ_ONLY)")
    for table in TABLES:
        if table == "schema_info":
            continue
        cols = [r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = "
                                          "current_database() AND table_name = ? ORDER BY column_index",
                                          [table]).fetchall()]
        if not cols:  # a table a later schema version added: the v1 file has no such table
            continue
        if table == "overrides":  # let the v1 file's own sequence number them, as the old engine did
            cols.remove("override_id")
        names = ", ".join(cols)
        order = " ORDER BY override_id" if table == "overrides" else ""
        con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM cur.{table}{order}")
    con.close()
    with Store(old) as s:
        assert s.version == schema.SCHEMA_VERSION
        pd.testing.assert_frame_equal(s.frame("overrides", RUN), overrides)
        assert _effect(s) == curated
        assert curation.restore_pair(s, RUN, IT, "m2", 0) == int(overrides["override_id"].max()) + 1


def test_a_version_3_pair_override_gets_its_pair_idx_column_from_after_json(tmp_path):
    """v4 moved a pair override's pair_idx from after_json into a column: old rows are migrated (0 when absent),
    new rows write the column, and the effective view keys on it."""
    path = tmp_path / "v3.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.DDL_V1)
    for version in (1, 2):
        con.execute(schema.MIGRATIONS[version])
    con.execute("INSERT INTO schema_info VALUES (3)")
    base = "INSERT INTO overrides (run_id, iteration, target, task_id, step, k, action, after_json, curator) VALUES "
    con.execute(base + "('r', 0, 'pair', 'a', 0, NULL, 'exclude', '{\"pair_idx\": 2}', 'ann'), "
                       "('r', 0, 'pair', 'b', 0, NULL, 'tie', '{}', 'ann'), "
                       "('r', 0, 'verdict', 'a', 0, 1, 'drop', '{}', 'ann')")
    con.close()
    with Store(path) as s:
        assert s.version == schema.SCHEMA_VERSION
        rows = s.query("SELECT task_id, target, coalesce(pair_idx, -1) AS p FROM overrides ORDER BY override_id")
        assert rows.values.tolist() == [["a", "pair", 2], ["b", "pair", 0], ["a", "verdict", -1]]
    with Store(tmp_path / "new.duckdb") as s:
        build_world(s)
        curation.exclude_pair(s, RUN, IT, "m1", 0, pair_idx=0)
        assert s.query("SELECT pair_idx FROM overrides").values.tolist() == [[0]]
        assert bool(s.effective_pairs(RUN, IT).set_index("task_id").loc["m1", "excluded"])


def test_reviews_count_toward_progress_and_never_change_the_data(store):
    """"Reviewed N of M": an item counts once anybody acted on it or marked it reviewed (looked at, left as is); a
    review mark never changes the effective pairs or training records."""
    pairs_before = curation.effective_pairs(store, RUN, IT)
    records_before = verdict_curation.effective_sft_records(store, RUN, IT)
    assert review_trail.review_progress(store, RUN, IT, "pair", "ann") == {"total": 3, "reviewed": 0, "mine": 0}
    curation.swap_pair(store, RUN, IT, "m1", 0, curator="ann")
    review_trail.mark_reviewed(store, RUN, IT, "pair", "m2", 0, 0, curator="bob")
    review_trail.mark_reviewed(store, RUN, IT, "pair", "m2", 0, 0, curator="ann")  # a second look: still one item
    assert review_trail.review_progress(store, RUN, IT, "pair", "ann") == {"total": 3, "reviewed": 2, "mine": 2}
    assert review_trail.review_progress(store, RUN, IT, "pair", "bob") == {"total": 3, "reviewed": 2, "mine": 1}
    after = curation.effective_pairs(store, RUN, IT).set_index("task_id")
    assert not after.loc["m2", "overridden"] and after.loc["m1", "override_action"] == "swap"
    assert after.drop(index="m1")[["chosen_k", "rejected_k"]].equals(
        pairs_before.set_index("task_id").drop(index="m1")[["chosen_k", "rejected_k"]])
    review_trail.mark_reviewed(store, RUN, IT, "verdict", "m1", 0, 0, curator="ann")
    assert review_trail.review_progress(store, RUN, IT, "verdict", "ann") == {"total": 3, "reviewed": 1, "mine": 1}
    assert verdict_curation.effective_sft_records(store, RUN, IT) == records_before
    with pytest.raises(ValueError, match="no pair"):
        review_trail.mark_reviewed(store, RUN, IT, "pair", "nope", 0, 0)


def test_undo_takes_back_a_curators_last_actions_one_by_one(store):
    """``u``: the curator's latest live action is undone by an appended ``undo`` row (the log keeps both); pressed
    again, the one before; another curator's actions are never touched; reviews and verdicts undo the same way."""
    auto = pair(store, "m1")
    curation.exclude_pair(store, RUN, IT, "m2", 0, curator="bob")
    curation.swap_pair(store, RUN, IT, "m1", 0, curator="ann")
    curation.tie_pair(store, RUN, IT, "m1", 0, curator="ann")
    review_trail.mark_reviewed(store, RUN, IT, "pair", "q1", 0, 0, curator="ann")
    assert review_trail.review_progress(store, RUN, IT, "pair", "ann") == {"total": 3, "reviewed": 3, "mine": 2}

    assert review_trail.undo_last(store, RUN, IT, "ann")["action"] == "reviewed"
    assert review_trail.review_progress(store, RUN, IT, "pair", "ann") == {"total": 3, "reviewed": 2, "mine": 1}
    assert review_trail.undo_last(store, RUN, IT, "ann")["action"] == "tie"
    assert pair(store, "m1")["override_action"] == "swap" and not pair(store, "m1")["tie"]
    assert review_trail.undo_last(store, RUN, IT, "ann")["action"] == "swap"
    back = pair(store, "m1")
    assert (back["chosen_k"], back["rejected_k"], back["overridden"]) == (auto["chosen_k"], auto["rejected_k"], False)
    with pytest.raises(ValueError, match="ann has nothing to undo"):
        review_trail.undo_last(store, RUN, IT, "ann")
    assert pair(store, "m2")["excluded"]  # bob's exclusion stands
    assert store.pairs_page(RUN, IT, overridden=True)["task_id"].tolist() == ["m2"]  # the materialised view agrees
    assert len(store.query("SELECT * FROM overrides WHERE action = 'undo'")) == 3  # nothing deleted: an audit log

    before = sft(store)["m1"]
    verdict_curation.drop_verdict(store, RUN, IT, "m1", 0, 0, curator="ann")
    assert "m1" not in sft(store)
    assert review_trail.undo_last(store, RUN, IT, "ann", "verdict")["action"] == "drop"
    assert sft(store)["m1"] == before
    with pytest.raises(ValueError, match="scope"):
        review_trail.undo_last(store, RUN, IT, "ann", "task")


def test_pair_curation_summary_tells_trained_overrides_from_later_ones(store):
    from engine.curation import exclude_pair, swap_pair, tie_pair
    from engine.curation_summary import live_pair_actions, pair_curation_summary

    build_world(store)
    auto = store.query("SELECT avg(rejected_logppl - chosen_logppl) AS m FROM pairs WHERE run_id = ?", [RUN])["m"][0]
    swap_pair(store, RUN, IT, "m1", curator="ann")
    exclude_pair(store, RUN, IT, "m2", curator="ann")
    recorded = live_pair_actions(store, RUN, IT)  # what train_planner records as it reads the pairs
    assert {k: recorded[k] for k in ("swap", "exclude", "tie", "choose")} == {"swap": 1, "exclude": 1, "tie": 0,
                                                                             "choose": 0}
    store.set_stage(RUN, IT, "train_planner", "done", counts={"rows": 2, "curation": recorded})
    store.add_train_logs(RUN, IT, "train_planner", [
        {"step": 1, "loss": 0.69, "rewards/margins": 0.0, "rewards/accuracies": 0.0},
        {"step": 2, "loss": 0.6, "rewards/margins": 0.25, "rewards/accuracies": 1.0}])
    tie_pair(store, RUN, IT, "q1", curator="bob")  # after the training: pending, not in the checkpoint
    (row,) = pair_curation_summary(store, RUN)
    assert row["iteration"] == IT and row["pairs"] == 3 and row["reviewed"] == 3
    assert row["overrides"] == {"swap": 1, "exclude": 1, "tie": 1, "choose": 0}
    assert row["trained_with"] == {"swap": 1, "exclude": 1, "tie": 0, "choose": 0} and row["pending"] == 1
    assert row["margin_auto"] == pytest.approx(auto)
    m1 = store.effective_pairs(RUN, IT).set_index("task_id").loc["m1"]
    assert row["margin_trained"] == pytest.approx(float(m1["margin"])) and m1["margin"] < 0  # the swapped pair only
    assert row["dpo"] == {"first_margin": 0.0, "last_margin": 0.25, "last_accuracy": 1.0, "logged": 2}


def test_pending_counts_only_pairs_a_retraining_would_change(store):
    """The reviewer's sequence after training (swap, undo, exclude, tie, restore, looks right: each cancelled) leaves
    the training data as the checkpoint had it: nothing pending, however often it is repeated. A real change counts
    once per pair, and putting a pair back the way it was trained takes it off again."""
    from engine.curation_summary import live_pair_actions, pair_curation_summary

    def pending() -> int:
        (row,) = pair_curation_summary(store, RUN)
        return row["pending"]

    curation.swap_pair(store, RUN, IT, "m1", curator="ann")  # in the checkpoint
    curation.swap_pair(store, RUN, IT, "q1", curator="ann")
    review_trail.undo_last(store, RUN, IT, "ann")  # undone before the training: not in the checkpoint
    recorded = live_pair_actions(store, RUN, IT)  # what train_planner records as it reads the pairs
    store.set_stage(RUN, IT, "train_planner", "done", counts={"rows": 3, "curation": recorded})
    assert pending() == 0
    for _ in range(2):  # the second round must not add up either
        curation.swap_pair(store, RUN, IT, "m2", curator="rev")
        review_trail.undo_last(store, RUN, IT, "rev")
        curation.exclude_pair(store, RUN, IT, "q1", curator="rev")
        curation.tie_pair(store, RUN, IT, "q1", curator="rev")
        curation.restore_pair(store, RUN, IT, "q1", curator="rev")
        review_trail.mark_reviewed(store, RUN, IT, "pair", "m2", 0, 0, curator="rev")
        assert pending() == 0
    curation.swap_pair(store, RUN, IT, "m2", curator="rev")
    assert pending() == 1
    curation.restore_pair(store, RUN, IT, "m1", curator="rev")  # the checkpoint's swap taken off: a change too
    assert pending() == 2
    curation.swap_pair(store, RUN, IT, "m1", curator="rev")  # swapped again: as the checkpoint had it
    curation.tie_pair(store, RUN, IT, "q1", curator="rev")
    curation.exclude_pair(store, RUN, IT, "q1", curator="rev")  # tie or exclude: out of the data alike
    assert pending() == 2
