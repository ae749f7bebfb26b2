"""Store: schema creation and versions, idempotent bulk writes, JSON columns, stages, the one-process lock,
resume keys, threads sharing one Store, and the studio's paginated queries."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from engine import schema
from engine.commands import status as status_command
from engine.store import Store, StoreError, StoreVersionError, status_summary
from engine.tasks import Task
from tests._store_world import IT, RUN, build_world

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    """Run the ``status`` command alone (the full CLI imports every command module, some owned elsewhere)."""
    parser = argparse.ArgumentParser()
    status_command.add_arguments(parser)
    return status_command.run(parser.parse_args(argv[1:]))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "sub" / "ws.duckdb") as s:
        yield s


def plan_row(task_id: str, k: int, text: str = "plan", run_id: str = "r", iteration: int = 0) -> dict:
    return dict(
        run_id=run_id,
        iteration=iteration,
        task_id=task_id,
        step=0,
        k=k,
        prompt="p",
        text=text,
        subgoals_json=["a", "b"],
        well_formed=True,
    )


def test_new_file_gets_schema_and_version(tmp_path):
    path = tmp_path / "a" / "b" / "ws.duckdb"
    with Store(path) as s:
        tables = set(s.query("SELECT table_name FROM duckdb_tables()")["table_name"])
        assert {"runs", "stages", "tasks", "plans", "scores", "pairs", "verdicts", "overrides"} <= tables
        assert s.version == schema.SCHEMA_VERSION
    with Store(path) as s:  # reopening keeps the version and does not duplicate schema_info
        assert s.query("SELECT version FROM schema_info")["version"].tolist() == [schema.SCHEMA_VERSION]


def test_newer_version_refused(tmp_path):
    path = tmp_path / "ws.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_info SET version = 99")
    con.close()
    with pytest.raises(StoreVersionError, match="newer"):
        Store(path)


def test_a_version_1_store_is_migrated_in_place(tmp_path):
    path = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.DDL_V1)
    con.execute("INSERT INTO schema_info VALUES (1)")
    con.execute("INSERT INTO verdicts (run_id, iteration, task_id, step, k, backend, status, reference_guided) "
                "VALUES ('r', 1, 't', 0, 0, 'reference', 'accepted', true)")
    con.close()
    with Store(path) as s:
        assert s.version == schema.SCHEMA_VERSION == 7
        assert s.query("SELECT version FROM schema_info")["version"].tolist() == [7]
        assert {"experiments", "experiment_runs", "swaps", "rollouts"} <= set(s.query("SHOW TABLES")["name"])
        rows = s.query("SELECT status, extra_json FROM verdicts")
        assert rows["status"].tolist() == ["accepted"] and rows["extra_json"].isna().all()
        assert "extra_json" in s.columns("verdicts") and "pair_idx" in s.columns("overrides")


def _v1_store(path: Path) -> None:
    """A store as the version-1 engine wrote it: the old DDL, version 1, a verdict."""
    con = duckdb.connect(str(path))
    con.execute(schema.DDL_V1)
    con.execute("INSERT INTO schema_info VALUES (1)")
    con.execute("INSERT INTO verdicts (run_id, iteration, task_id, step, k, backend, status, reference_guided) "
                "VALUES ('r', 1, 't', 0, 0, 'reference', 'accepted', true)")
    con.close()


def _raw_version(path: Path) -> tuple[int, bool]:
    """(schema_info version, verdicts has extra_json) read with plain DuckDB, bypassing Store."""
    con = duckdb.connect(str(path))
    try:
        version = con.execute("SELECT max(version) FROM schema_info").fetchall()[0][0]
        cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'verdicts'")
                .fetchall()}
        return version, "extra_json" in cols
    finally:
        con.close()


def test_newer_version_error_names_both_versions(tmp_path):
    path = tmp_path / "ws.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_info SET version = 99")
    con.close()
    newer = f"schema version 99, newer than this engine's {schema.SCHEMA_VERSION}"
    with pytest.raises(StoreVersionError, match=newer):
        Store(path)
    assert _raw_version(path)[0] == 99  # refused, not touched


def test_engine_run_refuses_a_newer_store_with_a_message_not_a_traceback(tmp_path, capsys):
    from engine.commands import run as run_command

    path = tmp_path / "ws.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_info SET version = 99")
    con.close()
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    sigint = signal.getsignal(signal.SIGINT)  # the command installs its own Ctrl-C handler
    try:
        assert run_command.run(parser.parse_args(["--db", str(path), "--run", "any", "--quiet"])) == 3
    finally:
        signal.signal(signal.SIGINT, sigint)
    captured = capsys.readouterr()  # on stderr, as every command says it: stdout ends with the run's JSON line
    assert f"error: {path} has schema version 99, newer than this engine's" in captured.err
    assert "error" not in captured.out


def test_a_file_that_is_not_a_duckdb_database_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.duckdb"
    path.write_text("not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="is not a DuckDB database"):
        Store(path)
    assert path.read_bytes() == before
    tasks = tmp_path / "tasks.jsonl"  # a name DuckDB reads as another file type: a CatalogException traceback
    tasks.write_text('{"id": "a"}\n')
    for read_only in (True, False):
        with pytest.raises(StoreError, match="is not a DuckDB database"):
            Store(tasks, read_only=read_only)
    assert tasks.read_text() == '{"id": "a"}\n'


def test_a_foreign_duckdb_database_is_refused_untouched(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE SCHEMA shop")
    con.execute("CREATE TABLE shop.sales (id INTEGER, amount DOUBLE)")  # not even in "main"
    con.close()
    for read_only in (False, True):
        with pytest.raises(StoreError, match="not a MOAT Studio store"):
            Store(path, read_only=read_only)
    con = duckdb.connect(str(path))
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
    con.close()
    assert tables == ["sales"]  # none of our tables were added


def test_an_old_store_opened_read_only_is_refused_with_both_versions(tmp_path):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    with pytest.raises(StoreVersionError, match=f"old schema version 1 \\(this engine: {schema.SCHEMA_VERSION}\\)"):
        Store(path, read_only=True)
    assert _raw_version(path) == (1, False)


def test_a_failed_migration_leaves_the_store_at_its_old_version(tmp_path, monkeypatch):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    # A future version whose last step fails after the earlier (real) steps already ran in the same transaction.
    future = schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(schema, "SCHEMA_VERSION", future)
    monkeypatch.setitem(schema.MIGRATIONS, future - 1, "ALTER TABLE no_such_table ADD COLUMN x INTEGER;")
    with pytest.raises(StoreError, match=f"from schema version 1 to {future} failed; the file is unchanged at "
                                         "version 1"):
        Store(path)
    assert _raw_version(path) == (1, False)  # the first step was rolled back with the rest
    monkeypatch.undo()
    with Store(path) as s:  # and the real engine still migrates it
        assert s.version == schema.SCHEMA_VERSION and s.count("verdicts", "r") == 1


def test_a_migration_killed_before_commit_leaves_the_store_at_its_old_version(tmp_path):
    path = tmp_path / "v1.duckdb"
    _v1_store(path)
    code = (
        "import os, signal, sys\nfrom engine import schema\nfrom engine.store import Store\n"
        "upgrade = schema.upgrade\n"
        "def killed(cur, version):\n"
        "    upgrade(cur, version)  # every step ran; the transaction is not committed yet\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "schema.upgrade = killed\nStore(sys.argv[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == -9, out.stderr
    assert _raw_version(path) == (1, False)
    with Store(path) as s:
        assert s.version == schema.SCHEMA_VERSION and "extra_json" in s.columns("verdicts")


def test_a_committed_write_survives_sigkill_and_an_uncommitted_one_vanishes(tmp_path):
    path = tmp_path / "ws.duckdb"
    code = (
        "import os, signal, sys\nfrom engine.store import Store\n"
        "s = Store(sys.argv[1])\n"
        "s.write('metrics', [{'run_id': 'r', 'iteration': 0, 'split': 's', 'domain': 'all', 'name': 'n', "
        "'value': 1.0}])\n"
        "cur = s._con.cursor()\ncur.execute('BEGIN TRANSACTION')\n"
        "cur.execute(\"INSERT INTO metrics VALUES ('r', 0, 's', 'all', 'half', 2.0)\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == -9, out.stderr
    assert path.with_name(path.name + ".wal").exists()  # not checkpointed: the next open replays the log
    with Store(path) as s:
        assert s.frame("metrics", "r")["name"].tolist() == ["n"]


def test_a_run_and_its_tasks_are_created_in_one_transaction(store, monkeypatch):
    task = Task(id="t1", domain="maths", source="x", split="train", question="1+1?", answer="2")
    rows = Store.task_rows
    monkeypatch.setattr(Store, "task_rows", staticmethod(lambda run_id, ts: [{**rows(run_id, ts)[0], "domain": None}]))
    with pytest.raises(duckdb.ConstraintException):
        store.create_run("demo", {}, "runs", [task])
    assert store.list_runs() == []  # no run without its tasks (its stages would resume to nothing)
    monkeypatch.undo()
    run_id = store.create_run("demo", {}, "runs", [task])
    assert [t.id for t in store.get_tasks(run_id)] == ["t1"]


def test_write_same_keys_twice_leaves_one_row(store):
    assert store.write("plans", [plan_row("t", 0, "first"), plan_row("t", 1)]) == 2
    store.write("plans", [plan_row("t", 0, "second")])
    df = store.frame("plans", "r", 0)
    assert df["k"].tolist() == [0, 1]
    assert df.loc[df["k"] == 0, "text"].item() == "second"
    # Duplicate keys inside one call: the last one wins, as a second write would.
    store.write("plans", [plan_row("t", 0, "x"), plan_row("t", 0, "y")])
    assert store.frame("plans", "r", 0, k=0)["text"].tolist() == ["y"]


def test_bulk_write_100k_rows_from_dataframe(store):
    n = 100_000
    df = pd.DataFrame(
        {
            "run_id": "r",
            "iteration": 0,
            "task_id": [f"t{i}" for i in range(n)],
            "step": 0,
            "k": 0,
            "logppl": 0.5,
            "ppl": 1.6,
            "n_tokens": 7,
        }
    )
    assert store.write("scores", df) == n
    assert store.count("scores", "r", 0) == n


def test_json_columns_encoded_and_tasks_round_trip(store):
    task = Task(
        id="t1",
        domain="qa",
        source="s",
        split="train",
        question="Où est né Ünal?",
        context=["Ünal: né à Zürich."],
        gold_subgoals=["Trouver."],
        gold_actions=["R1 = QA([x], y)"],
        answer="Zürich",
        meta={"level": 2, "tags": ["é"]},
    )
    store.put_tasks("r", [task])
    raw = store.query("SELECT context_json, meta_json FROM tasks")
    assert raw["context_json"][0] == '["Ünal: né à Zürich."]'  # ensure_ascii=False
    assert raw["meta_json"][0] == '{"level": 2, "tags": ["é"]}'
    assert store.get_task("r", "t1") == task
    assert store.get_tasks("r", split="train", domain="qa") == [task]
    assert store.get_tasks("r", domain="maths") == []
    with pytest.raises(KeyError):
        store.get_task("r", "nope")
    store.write("plans", [{**plan_row("t", 0), "subgoals_json": '["already", "text"]'}])  # strings pass through
    assert store.frame("plans", "r")["subgoals_json"][0] == '["already", "text"]'


def test_names_are_checked_against_the_schema(store):
    with pytest.raises(ValueError, match="unknown table"):
        store.write("plans; DROP TABLE runs", [plan_row("t", 0)])
    with pytest.raises(ValueError, match="unknown column"):
        store.write("plans", [{**plan_row("t", 0), "evil": 1}])
    with pytest.raises(ValueError, match="unknown column"):
        store.frame("plans", "r", **{"k = 0 OR 1": 1})
    assert store.count("runs", "r") == 0


def test_runs_ids_and_config(store, monkeypatch):
    import datetime

    from engine import ledger

    class Frozen(datetime.datetime):  # ids carry the minute: two runs must not straddle one (it happened in CI)
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 1, 14, 8)

    monkeypatch.setattr(ledger, "datetime", Frozen)
    a = store.create_run("Demo Run!", {"k": 4, "lr": 1e-6}, "runs/{run_id}")
    b = store.create_run("Demo Run!", {}, "runs/x")
    assert a == "demo-run-20261201-1408" and b == a + "-2"
    run = store.get_run(a)
    assert run["config"] == {"k": 4, "lr": 1e-6} and run["run_dir"] == f"runs/{a}"
    assert [r["run_id"] for r in store.list_runs()] == [a, b]
    assert store.get_run("missing") is None


def test_stage_times_are_utc_whatever_the_local_zone(store, monkeypatch):
    """A stage's stamps are UTC, so its duration and an experiment's busy time survive a daylight-saving change (a
    local clock would put a stage spanning one an hour out) and a store merged from another zone."""
    import time
    from datetime import UTC, datetime, timedelta

    monkeypatch.setenv("TZ", "America/New_York")  # UTC-5 or UTC-4: never equal to UTC
    time.tzset()
    try:
        assert datetime.now().hour != datetime.now(UTC).hour or datetime.now().day != datetime.now(UTC).day
        store.set_stage("tz", 0, "sample", "running")
        stamped = store.stage_status("tz", 0)["sample"]["started_at"]
        assert abs(stamped - datetime.now(UTC).replace(tzinfo=None)) < timedelta(minutes=1), stamped
    finally:
        monkeypatch.undo()
        time.tzset()


def test_stage_status_transitions(store):
    store.set_stage("r", 0, "sample", "pending")
    assert store.stage_status("r", 0)["sample"]["started_at"] is None
    store.set_stage("r", 0, "sample", "running")
    s = store.stage_status("r", 0)["sample"]
    assert s["status"] == "running" and s["started_at"] is not None and s["finished_at"] is None
    store.set_stage("r", 0, "sample", "failed", error="boom")
    s = store.stage_status("r", 0)["sample"]
    assert s["status"] == "failed" and s["finished_at"] is not None and s["error"] == "boom"
    store.set_stage("r", 0, "sample", "running")  # a retry clears the old error and finish
    store.set_stage("r", 0, "sample", "done", counts={"rows": 12})
    s = store.stage_status("r", 0)["sample"]
    assert s["status"] == "done" and s["error"] is None and s["counts"] == {"rows": 12}
    assert s["finished_at"] >= s["started_at"]
    store.set_stage("r", 1, "score", "stopped")
    assert store.iterations("r") == [0, 1]
    with pytest.raises(ValueError):
        store.set_stage("r", 0, "sample", "exploded")


def test_second_process_gets_store_locked_error(store):
    code = (
        "import sys\nfrom engine.store import Store, StoreLockedError\n"
        "try:\n    Store(sys.argv[1])\nexcept StoreLockedError as exc:\n    print('LOCKED', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(store.path)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "LOCKED" in out.stdout, out.stderr
    assert "open in another process" in out.stdout and "--db" in out.stdout


def test_keys_done_for_resume(store):
    store.write("plans", [plan_row("a", 0), plan_row("a", 1), plan_row("b", 0), plan_row("c", 0, iteration=1)])
    assert store.keys_done("plans", "r", 0) == {("a", 0), ("b", 0)}
    assert store.keys_done("plans", "r", 0, cols=("task_id", "k")) == {("a", 0), ("a", 1), ("b", 0)}
    assert store.keys_done("plans", "other", 0) == set()


def test_threads_share_one_store(store):
    errors: list[BaseException] = []

    def writer(table: str, make) -> None:
        try:
            for batch in range(20):
                store.write(table, [make(batch, i) for i in range(50)])
                store.count(table, "r")
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised in the main thread
            errors.append(exc)

    def plan(b, i):
        return plan_row(f"t{b}", i)

    def score(b, i):
        return dict(run_id="r", iteration=0, task_id=f"t{b}", step=0, k=i, logppl=1.0, ppl=2.7, n_tokens=3)

    def metric(b, i):
        return dict(run_id="r", iteration=b, split="train", domain="all", name=f"m{i}", value=float(i))

    threads = [
        threading.Thread(target=writer, args=a) for a in (("plans", plan), ("scores", score), ("metrics", metric))
    ]
    for t in threads:
        t.start()
    for _ in range(10):  # a UI thread reading meanwhile
        store.status_summary()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.count("plans", "r") == store.count("scores", "r") == store.count("metrics", "r") == 1000


def test_concurrent_updates_of_the_same_rows_are_retried(store):
    errors: list[BaseException] = []

    def bump(n: int) -> None:
        try:
            for _ in range(10):
                store.set_stage("r", 0, "sample", "running", counts={"by": n})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=bump, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.stage_status("r", 0)["sample"]["status"] == "running"


def test_write_batch_with_delete_rebuilds_in_one_transaction(store):
    store.write("plans", [plan_row("a", k) for k in range(3)])
    store.write_batch(
        [("plans", [plan_row("a", 0, "new"), plan_row("a", 1, "new")])],
        deletes=[("plans", {"run_id": "r", "iteration": 0, "task_id": "a"})],
    )
    assert store.frame("plans", "r", 0)["text"].tolist() == ["new", "new"]
    with pytest.raises(ValueError):  # a rebuild with a bad row changes nothing
        store.write_batch([("plans", [{**plan_row("a", 5), "bogus": 1}])], deletes=[("plans", {"run_id": "r"})])
    assert store.count("plans", "r") == 2
    store.replace("plans", "r", 0, [plan_row("b", 0)])
    assert store.keys_done("plans", "r", 0, cols=("task_id", "k")) == {("b", 0)}
    assert store.delete("plans", "r", 0, task_id="b") == 1


def test_train_logs_metrics_checkpoints(store):
    store.add_train_logs("r", 0, "train_planner", [{"loss": 0.9, "step": 1, "epoch": 0.5}, {"rewards/margins": 0.2}])
    store.add_train_logs("r", 0, "train_planner", [{"loss": 0.4, "step": 5}])
    df = store.frame("train_logs", "r", 0)
    assert df["seq"].tolist() == [0, 1, 2]
    assert df["step"].tolist() == [1, 1, 5]
    assert df["loss"].isna().tolist() == [False, True, False]
    assert '"rewards/margins": 0.2' in df["logs_json"][1]
    store.put_metrics("r", 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.5}])
    store.put_metrics("r", 0, [{"split": "held_in", "domain": "all", "name": "accuracy", "value": 0.75}])
    assert store.frame("metrics", "r", 0)["value"].tolist() == [0.75]
    store.put_checkpoint("r", 0, "planner", Path("runs/r/iter_00/planner"), "lora-adapter")
    assert store.checkpoint("r", 0, "planner")["path"] == "runs/r/iter_00/planner"
    assert store.checkpoint("r", 0, "grounder") is None


def test_status_summary_and_cli(tmp_path, capsys):
    path = tmp_path / "ws.duckdb"
    with Store(path) as s:
        build_world(s)
        s.set_stage(RUN, IT, "pairs", "done", counts={"pairs": 3})
    summary = status_summary(path)
    run = summary["runs"][RUN]
    assert run["run_id"] == RUN and run["tasks"] == 3
    it0 = run["iterations"][0]
    assert it0["stages"]["pairs"]["status"] == "done"
    assert it0["rows"]["plans"] == 8 and it0["rows"]["pairs"] == 3 and it0["rows"]["verdicts"] == 3
    assert main(["status", "--db", str(path), "--json"]) == 0
    assert f'"run_id": "{RUN}"' in capsys.readouterr().out
    assert main(["status", "--db", str(path)]) == 0  # the run's own directory, where its checkpoints are
    assert f"dir={Path(run['run_dir']) / RUN}\n" in capsys.readouterr().out
    assert main(["status", "--db", str(tmp_path / "none.duckdb")]) == 2
    assert capsys.readouterr().err == f"error: no store at {tmp_path / 'none.duckdb'}\n"  # --db given: no hint


def test_status_says_what_an_evaluated_iteration_scored_and_which_experiments_there_are(tmp_path, capsys):
    """A finished run's accuracy was nowhere in the CLI but ``swap`` (which evaluates again): ``status`` prints each
    evaluated split (all domains) with its Wilson interval and gap PPL, and the experiments with their report."""
    path = tmp_path / "ws.duckdb"
    with Store(path) as s:
        build_world(s)
        s.put_metrics(RUN, IT, [{"split": "held_out", "domain": d, "name": n, "value": v}
                                for d, n, v in (("all", "accuracy", 0.258), ("all", "accuracy_lo", 0.205),
                                                ("all", "accuracy_hi", 0.319), ("all", "n", 225.0),
                                                ("all", "gap_ppl", 1.4911), ("maths", "accuracy", 0.4))])
        s.write("experiments", [{"experiment_id": "abl-0000beef", "name": "abl", "source": "abl.toml",
                                 "config_json": {}}])
        s.write("experiment_runs", [{"experiment_id": "abl-0000beef", "variant": "full", "seed": 1, "run_id": RUN}])
    summary = status_summary(path)
    assert summary["runs"][RUN]["iterations"][0]["evaluation"] == {
        "held_out": {"accuracy": 0.258, "ci95": [0.205, 0.319], "n": 225, "gap_ppl": 1.4911}}
    assert summary["experiments"] == [{"experiment_id": "abl-0000beef", "name": "abl", "runs": 1}]
    assert main(["status", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "    evaluation: held-out 25.8% [20.5, 31.9] of 225, gap PPL 1.491\n" in out
    assert f"experiment abl-0000beef (abl, 1 run(s)): python -m engine report --db {path} --experiment abl-0000beef" \
        in out


def test_pairs_page_filters_and_paginates(store):
    build_world(store)
    page = store.pairs_page(RUN, IT)
    assert page["task_id"].tolist() == ["m1", "m2", "q1"] and page["total"].tolist() == [3, 3, 3]
    assert page.loc[0, "chosen_text"].startswith("Subgoal 1: Multiply") and page.loc[0, "rejected_text"] == (
        "Subgoal 1: Guess."
    )
    assert "Tom has" in page.loc[0, "question"]
    assert store.pairs_page(RUN, IT, min_margin=0.5)["task_id"].tolist() == ["m1", "q1"]
    assert store.pairs_page(RUN, IT, max_margin=0.5)["task_id"].tolist() == ["m2"]
    assert store.pairs_page(RUN, IT, text="LOVELACE")["task_id"].tolist() == ["q1"]
    assert store.pairs_page(RUN, IT, text="%")["task_id"].tolist() == []  # no LIKE wildcards from users
    second = store.pairs_page(RUN, IT, order="-margin", limit=1, offset=1)
    assert second["task_id"].tolist() == ["q1"] and second["total"].tolist() == [3]
    assert store.pairs_page(RUN, IT, overridden=True).empty


def test_task_plans_and_verdict_queue(store):
    build_world(store)
    plans = store.task_plans(RUN, IT, "m1")
    assert plans["k"].tolist() == [0, 2, 1, 3]  # by logppl, ties by k
    assert plans["chosen"].tolist() == [True, False, False, False]
    assert plans["rejected"].tolist() == [False, False, False, True]
    queue = store.verdict_queue(RUN, IT)
    assert queue["task_id"].tolist() == ["m1", "m2", "q1"] and queue["total"][0] == 3
    corrected = store.verdict_queue(RUN, IT, status="corrected")
    assert corrected["task_id"].tolist() == ["m2"] and corrected["grounding_actions"][0] == "R1 = Calculator(10+4)"
    assert store.verdict_queue(RUN, IT, limit=1, offset=2)["task_id"].tolist() == ["q1"]


def test_a_stage_left_running_by_a_dead_process_reads_as_interrupted(tmp_path):
    """``engine status`` can only open the file when no process holds it, so 'running' there means killed."""
    path = tmp_path / "ws.duckdb"
    with Store(path) as s:
        build_world(s)
        s.set_stage(RUN, IT, "pairs", "done", counts={"pairs": 3})
        s.set_stage(RUN, IT, "ground", "running")
    stages = status_summary(path)["runs"][RUN]["iterations"][0]["stages"]
    assert stages["ground"]["status"] == "interrupted" and stages["pairs"]["status"] == "done"


def test_review_orders_put_unreviewed_and_disagreeing_items_first(store):
    from engine.review_trail import mark_reviewed, undo_last

    build_world(store)
    # a grounding that misses the gold answer but was accepted: the critic contradicts the execution
    g = dict(run_id=RUN, iteration=IT, step=0, prompt="p", values_json={}, answer=None, error=None, ok=True)
    v = dict(run_id=RUN, iteration=IT, step=0, backend="reference", model=None, reference_guided=True, raw="",
             corrected_subgoals_json=None, corrected_actions=None)
    store.write_batch([("groundings", [{**g, "task_id": "q1", "k": 1, "actions": "R1 = Calculator(1)",
                                        "correct": False}]),
                       ("verdicts", [{**v, "task_id": "q1", "k": 1, "status": "accepted"}])])
    order = store.verdict_queue(RUN, IT, order="disagreement")
    assert list(zip(order["task_id"], order["k"]))[:1] == [("q1", 1)]
    with pytest.raises(ValueError, match="order must be one of"):
        store.verdict_queue(RUN, IT, order="nope")

    mark_reviewed(store, RUN, IT, "verdict", "m1", 0, 0, curator="ann")
    unreviewed = store.verdict_queue(RUN, IT, order="unreviewed")
    assert unreviewed["task_id"].tolist()[-1] == "m1" and unreviewed["reviewed"].tolist()[-1]
    assert store.verdict_queue(RUN, IT, reviewed=True)["task_id"].tolist() == ["m1"]

    by_margin = store.pairs_page(RUN, IT, order="margin")["task_id"].tolist()
    assert store.pairs_page(RUN, IT, order="unreviewed")["task_id"].tolist() == by_margin  # nobody reviewed yet
    mark_reviewed(store, RUN, IT, "pair", by_margin[0], 0, 0, curator="ann")
    for page in (store.pairs_page(RUN, IT, order="unreviewed"), store.pairs_page_sql(RUN, IT, order="unreviewed")):
        assert page["task_id"].tolist() == by_margin[1:] + by_margin[:1]  # the materialised view and the SQL agree
        assert page["reviewed"].tolist() == [False, False, True]
    undo_last(store, RUN, IT, "ann", "pair")  # an undone review is no review
    assert store.pairs_page(RUN, IT, order="unreviewed")["task_id"].tolist() == by_margin


def test_an_unknown_run_id_is_answered_with_the_ids_it_was_likely_meant_to_be(store):
    """Run ids carry a name, a seed and a minute; the error names the ids that start with or are spelt close to what
    was typed, else the newest few, else says the store holds none."""
    from engine.errors import UnknownRun

    assert store.unknown_run("x") == "no run 'x' in this store; it holds no runs"
    assert str(UnknownRun(store.unknown_run("x"))) == "no run 'x' in this store; it holds no runs"  # no quotes
    ids = [f"ablations-{v}-s11-20261206-04{m}" for v, m in (("full", 10), ("no-stage1", 11), ("no-critic", 29))]
    ids += [f"tiny-full-s{s}-20261206-0{s}00" for s in range(1, 6)]
    for n, run_id in enumerate(ids):
        store.write("runs", [{"run_id": run_id, "name": run_id, "config_json": "{}", "run_dir": "runs/x",
                              "created_at": f"2026-12-06 0{n}:00:00"}])
    assert store.unknown_run("ablations-full") == ("no run 'ablations-full' in this store; did you mean "
                                                   "'ablations-full-s11-20261206-0410'?")
    assert "did you mean 'ablations-no-critic-s11-20261206-0429'" in store.unknown_run(
        "ablations-no-critic-s11-20261206-0428", "s.duckdb")  # a mistyped minute
    assert store.unknown_run("zzz", "s.duckdb") == (
        "no run 'zzz' in s.duckdb; its runs, newest first: tiny-full-s5-20261206-0500, tiny-full-s4-20261206-0400, "
        "tiny-full-s3-20261206-0300, tiny-full-s2-20261206-0200, tiny-full-s1-20261206-0100 and 3 more")
    assert "its runs, newest first: tiny-full-s5" in store.unknown_run("")  # not "did you mean" every run


def test_two_stores_never_share_a_run_directory(tmp_path, loop_config, monkeypatch):
    """Two stores (the studio's and a CLI run on another ``--db``) creating a run of one name in one minute in one
    workdir both took ``<name>-<minute>``: the second overwrote the first's config.toml, and would have replaced its
    checkpoints. The second now takes the next id whose directory is free."""
    from datetime import datetime

    from engine import ledger
    from engine.loop import create_run, run_directory

    class OneMinute(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 7, 21, 58, 30, tzinfo=tz)

    monkeypatch.setattr(ledger, "datetime", OneMinute)
    ids, directories = [], []
    for db in ("a.duckdb", "b.duckdb"):
        with Store(tmp_path / db) as store:
            loop_config.run.seed = len(ids) + 1
            run_id = create_run(store, loop_config)
            ids.append(run_id)
            directories.append(run_directory(store, run_id))
    assert ids == ["run-20261207-2158", "run-20261207-2158-2"]  # before: the same id twice
    assert directories[0] != directories[1]
    seeds = [d.joinpath("config.toml").read_text(encoding="utf-8") for d in directories]
    assert "seed = 1" in seeds[0] and "seed = 2" in seeds[1]  # each directory still describes its own run


def test_a_failed_registration_leaves_no_run_directory(tmp_path, loop_config, monkeypatch):
    from engine.loop import create_run

    def refuse(*args, **kwargs):
        kwargs["claim"]("demo-x")  # the directory is claimed, then the store fails
        raise StoreError("disk full")

    with Store(tmp_path / "s.duckdb") as store:
        monkeypatch.setattr(store, "create_run", refuse)
        with pytest.raises(StoreError):
            create_run(store, loop_config)
    assert not (Path(loop_config.run.workdir) / "demo-x").exists()
