"""A stage's recorded time counts every span it ran (``engine.ledger``: ``earlier_s`` plus the latest span): a stage
stopped and resumed, failed and retried, or a critique judged again by ``step critique --retry-errors`` keeps its
earlier seconds in ``stage_status``, ``status``, the studio's stage time and an experiment report's wall times; a
store from schema v6 opens with 0 earlier seconds. The clock is ``engine.ledger.utc_now``, patched to set times."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pytest

from engine import ledger, schema
from engine.report import experiment_report
from engine.store import Store

NOON = datetime(2026, 1, 1, 12, 0, 0)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "ws.duckdb") as s:
        yield s


@pytest.fixture
def clock(monkeypatch):
    """``clock(seconds)`` sets the time ``set_stage`` stamps to ``seconds`` after noon."""
    now = [NOON]
    monkeypatch.setattr(ledger, "utc_now", lambda: now[0])

    def at(seconds: float) -> None:
        now[0] = NOON + timedelta(seconds=seconds)

    return at


def transitions(store: Store, clock, run_id: str, stage: str, steps: list[tuple[float, str]],
                iteration: int = 1) -> None:
    for seconds, status in steps:
        clock(seconds)
        store.set_stage(run_id, iteration, stage, status)


def test_a_stopped_and_resumed_stage_counts_both_spans(store, clock):
    """10 s, a stop (Ctrl-C), an idle hour, then 5 s to done: 15 s, while started_at .. finished_at stay the latest
    span (the studio's "running since" and ETA read it)."""
    from studio.stage_text import stage_seconds

    transitions(store, clock, "r", "sample", [(0, "running"), (10, "stopped"), (3610, "running")])
    running = store.stage_status("r", 1)["sample"]
    assert (running["earlier_s"], running["seconds"], running["finished_at"]) == (10.0, None, None)
    assert running["started_at"] == NOON + timedelta(seconds=3610)
    transitions(store, clock, "r", "sample", [(3615, "done")])
    done = store.stage_status("r", 1)["sample"]
    assert (done["earlier_s"], done["seconds"]) == (10.0, 15.0)
    assert (done["finished_at"] - done["started_at"]).total_seconds() == 5.0
    assert stage_seconds(done) == 15.0  # the Run tab's stage table and the pipeline card
    # a failure and its retry count the same way
    transitions(store, clock, "r", "score", [(0, "running"), (2.5, "failed"), (60, "running"), (61, "done")])
    assert store.stage_status("r", 1)["score"]["seconds"] == 3.5


def test_status_json_carries_the_total(store, clock):
    store.write("runs", [{"run_id": "r", "name": "r", "config_json": {}, "run_dir": "runs"}])
    transitions(store, clock, "r", "sample", [(0, "running"), (10, "stopped"), (100, "running"), (105, "done")])
    stages = store.status_summary()["runs"]["r"]["iterations"][0]["stages"]
    assert stages["sample"]["seconds"] == 15.0 and stages["sample"]["earlier_s"] == 10.0


def test_a_killed_span_adds_nothing_and_pending_starts_afresh(store, clock):
    """A process killed mid-stage records no end, so that span's length is unknown and is not guessed; a stage set
    back to pending starts its time from nothing."""
    transitions(store, clock, "r", "sample", [(0, "running"), (10, "stopped"), (20, "running"),
                                              (50, "running"), (55, "done")])  # killed between 20 and 50
    assert store.stage_status("r", 1)["sample"]["seconds"] == 10.0 + 5.0
    transitions(store, clock, "r", "sample", [(60, "pending")])
    pending = store.stage_status("r", 1)["sample"]
    assert (pending["earlier_s"], pending["seconds"], pending["started_at"]) == (0.0, None, None)
    transitions(store, clock, "r", "sample", [(70, "running"), (72, "done")])
    assert store.stage_status("r", 1)["sample"]["seconds"] == 2.0


def test_retry_errors_keeps_the_first_judgings_seconds(store, clock):
    """``step critique --retry-errors`` marks a done critique stopped an hour later, then judges again: the stage's
    time is both judgings (10 s + 5 s), neither the second alone nor the idle hour between them."""
    from engine.commands.step import _remove_error_verdicts

    transitions(store, clock, "r", "critique", [(0, "running"), (10, "done")])
    store.write("verdicts", [{"run_id": "r", "iteration": 1, "task_id": "t", "step": 0, "k": k, "backend": "openai",
                              "status": status, "reference_guided": False}
                             for k, status in ((0, "accepted"), (1, "error"))])
    clock(3600)
    _remove_error_verdicts(store, "r", 1)
    stopped = store.stage_status("r", 1)["critique"]
    assert stopped["status"] == "stopped" and stopped["finished_at"] == NOON + timedelta(seconds=10)
    assert stopped["seconds"] == 10.0 and store.count("verdicts", "r", 1) == 1
    transitions(store, clock, "r", "critique", [(3700, "running"), (3705, "done")])
    assert store.stage_status("r", 1)["critique"]["seconds"] == 15.0


def test_the_report_counts_every_span_of_a_run(store, clock, tmp_path):
    """A run's ``wall_s`` sums every span of its stages; ``busy`` is the union of the latest spans plus the earlier
    spans' seconds: exact for runs one after another, an upper bound where an earlier span ran beside another run."""
    store.write("experiments", [{"experiment_id": "e-1", "name": "e", "source": "e.toml",
                                 "config_json": {"variants": {"full": []}, "seeds": [1, 2], "iterations": 1,
                                                 "baseline": "full"}}])
    runs = []
    for seed in (1, 2):
        run_id = store.create_run(f"e/full/s{seed}", {}, tmp_path)
        store.write("experiment_runs", [{"experiment_id": "e-1", "variant": "full", "seed": seed, "run_id": run_id}])
        runs.append(run_id)
    # seed 1: sample 0-10, stopped; resumed 100-105. seed 2: sample 20-30, one span.
    transitions(store, clock, runs[0], "sample", [(0, "running"), (10, "stopped"), (100, "running"), (105, "done")])
    transitions(store, clock, runs[1], "sample", [(20, "running"), (30, "done")])
    report = experiment_report(store, "e-1")
    wall = {r["seed"]: r["wall_s"] for r in report["runs"]}
    assert wall == {1: 15.0, 2: 10.0}
    assert report["wall_s"]["total"] == pytest.approx(25.0)
    assert report["wall_s"]["busy"] == pytest.approx(25.0)  # 0-10, 20-30, 100-105: no overlap, exact
    # seed 2 again, now beside seed 1's first span (5-15): the clock time was 0-15 and 100-105 (20 s); the earlier
    # span's position is not stored, so busy counts it apart: its 10 s + the union of 5-15 and 100-105 (15 s) = 25 s,
    # 5 s too many, and never above the total.
    transitions(store, clock, runs[1], "sample", [(5, "pending"), (5, "running"), (15, "done")])
    report = experiment_report(store, "e-1")
    assert report["wall_s"]["busy"] == pytest.approx(25.0) and report["wall_s"]["total"] == pytest.approx(25.0)


def test_a_version_6_store_opens_with_no_earlier_seconds(tmp_path):
    """A v6 store's stages kept only their latest span: migrated, each has 0 earlier seconds (what the overwritten
    spans took is not known), its latest span still counts, and a resume from then on adds up."""
    path = tmp_path / "v6.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.DDL_V1)
    for version in range(1, 6):
        con.execute(schema.MIGRATIONS[version])
    con.execute("INSERT INTO schema_info VALUES (6)")
    con.execute("INSERT INTO stages VALUES ('r', 1, 'sample', 'stopped', ?, ?, NULL, 'stopped')",
                [NOON, NOON + timedelta(seconds=8)])
    con.close()
    with Store(path) as store:
        assert store.version == schema.SCHEMA_VERSION == 7
        assert store.columns("stages")[-1] == "earlier_s"
        old = store.stage_status("r", 1)["sample"]
        assert (old["earlier_s"], old["seconds"]) == (0.0, 8.0)
        store.set_stage("r", 1, "sample", "running")
        assert store.stage_status("r", 1)["sample"]["earlier_s"] == 8.0


def test_retry_errors_after_a_kill_leaves_the_open_span_open(store, clock):
    """A critique killed mid-judging (left ``running``, no end) and judged again a day later by ``--retry-errors``:
    the killed span has no known end, so it adds nothing; a stop stamped at the retry would count the day as
    judging."""
    from engine.commands.step import _remove_error_verdicts

    transitions(store, clock, "r", "critique", [(0, "running")])
    store.write("verdicts", [{"run_id": "r", "iteration": 1, "task_id": "t", "step": 0, "k": k, "backend": "openai",
                              "status": status, "reference_guided": False}
                             for k, status in ((0, "accepted"), (1, "error"))])
    clock(86_400)
    _remove_error_verdicts(store, "r", 1)
    assert store.stage_status("r", 1)["critique"]["status"] == "running"  # a resume runs it again anyway
    assert store.count("verdicts", "r", 1) == 1
    transitions(store, clock, "r", "critique", [(86_500, "running"), (86_505, "done")])
    assert store.stage_status("r", 1)["critique"]["seconds"] == 5.0


def test_running_a_done_stage_again_is_a_redo_that_starts_its_time_afresh(store, clock):
    """``step`` on a done stage writes its rows anew: the stage's time is the redo's, not both runs'; a skipped stage
    run later likewise. A stopped or failed stage resumed keeps its earlier seconds."""
    transitions(store, clock, "r", "sample", [(0, "running"), (10, "done"), (100, "running"), (103, "done")])
    assert store.stage_status("r", 1)["sample"]["seconds"] == 3.0
    transitions(store, clock, "r", "ground", [(0, "skipped"), (50, "running"), (54, "done")])
    assert store.stage_status("r", 1)["ground"]["seconds"] == 4.0
    transitions(store, clock, "r", "score", [(0, "running"), (6, "failed"), (20, "running"), (22, "done")])
    assert store.stage_status("r", 1)["score"]["seconds"] == 8.0


def test_the_v7_column_carries_no_constraint_and_a_null_reads_as_zero(store, clock):
    """DuckDB 1.x (``duckdb>=1.3`` is allowed) refuses ``ADD COLUMN`` with a constraint ("not yet supported"), and a
    migration it refuses would stop every store from opening there, a new one included: the v7 column is a plain
    ``DOUBLE DEFAULT 0``, and a NULL in it (no engine code writes one) counts as 0 everywhere it is read."""
    assert "NOT NULL" not in schema.MIGRATIONS[6].upper()
    transitions(store, clock, "r", "sample", [(0, "running"), (10, "done")])
    with store._cursor() as cur:
        cur.execute("UPDATE stages SET earlier_s = NULL")
    row = store.stage_status("r", 1)["sample"]
    assert (row["earlier_s"], row["seconds"]) == (0.0, 10.0)
    transitions(store, clock, "r", "sample", [(20, "stopped"), (30, "running"), (32, "done")])
    assert store.stage_status("r", 1)["sample"]["seconds"] == 12.0  # the NULL read as 0, then 10 + 2
