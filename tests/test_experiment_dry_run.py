"""``experiment --dry-run``: what the command would do, read off the store and written nowhere.

The store is written by hand (runs made by the experiment's own ``ensure_run``, stage records with chosen
durations), so the plan and the estimate are checked against numbers worked out here, and no model runs."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path

from engine.__main__ import main
from engine.experiment import load_experiment
from engine.runner import ensure_run, plan_runs, register
from engine.store import Store

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 1, 1, 12, 0, 0)
# Durations in seconds of the stages recorded done: (variant, seed) -> [(iteration, stage, seconds)].
DONE = {
    ("full", 1): [(0, "evaluate", 10), (1, "sample", 4), (1, "score", 2), (1, "pairs", 1), (1, "train_planner", 6),
                  (1, "ground", 3), (1, "critique", 1), (1, "train_grounder", 8), (1, "evaluate", 12)],
    ("no_stage2", 1): [(0, "evaluate", 20), (1, "sample", 6)],  # then killed inside score
}
# Medians of those, iteration 0 apart: its evaluation (10, 20) 15; at iteration 1 sample (4, 6) 5, every other
# stage its one value.
INITIAL_EVALUATE = 15
MEDIAN = {"evaluate": 12, "sample": 5, "score": 2, "pairs": 1, "train_planner": 6, "ground": 3, "critique": 1,
          "train_grounder": 8}
STAGE2 = ("ground", "critique", "train_grounder")  # what no_stage2 records as skipped, in no time


def experiment_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(
        "[experiment]\n"
        'name = "plan"\n'
        f"base = {json.dumps(str(ROOT / 'examples' / 'demo.toml'))}\n"
        "seeds = [1, 2]\n"
        "iterations = 1\n"
        f"set = [{json.dumps('run.workdir=' + str(tmp_path / 'runs'))}]\n"
        'swap = ["full"]\n'
        "[variants.full]\nset = []\n"
        '[variants.no_stage2]\nset = ["stages.stage2=false"]\n')
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_dry_run_without_a_store_creates_nothing_and_plans_every_run(tmp_path, capsys):
    db = tmp_path / "none" / "s.duckdb"
    assert main(["experiment", "--config", str(experiment_file(tmp_path)), "--db", str(db), "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not db.exists() and not db.parent.exists()
    assert [(r["name"], r["action"], r["units"]) for r in out["runs"]] == [
        ("plan/full/s1", "create", 9), ("plan/no_stage2/s1", "create", 9), ("plan/full/s2", "create", 9),
        ("plan/no_stage2/s2", "create", 9)]
    assert out["dry_run"] and out["units"] == 36 and out["swaps"] == 2
    assert out["estimate_s"] is None and out["unestimated"] == 36 and out["estimate_from"] == "no store yet"


def test_a_dry_run_reads_what_is_left_and_costs_it_at_the_stores_medians(tmp_path, capsys):
    config = experiment_file(tmp_path)
    exp = load_experiment(config)
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        register(store, exp, [1, 2], 1)
        for (variant, seed), stages in DONE.items():
            run_id = ensure_run(store, exp, plan_runs(store, exp, [variant], [seed], 1)[0], 1)
            store.write("stages", [{"run_id": run_id, "iteration": t, "stage": stage, "status": "done",
                                    "started_at": START, "finished_at": START + timedelta(seconds=seconds)}
                                   for t, stage, seconds in stages])
            if variant == "no_stage2":
                store.set_stage(run_id, 1, "score", "running")  # a kill leaves it so
    before = digest(db)
    capsys.readouterr()
    assert main(["experiment", "--config", str(config), "--db", str(db), "--dry-run"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert digest(db) == before  # opened read-only: not a byte changed
    with Store(db, read_only=True) as store:
        links = {(v, int(s)): r for v, s, r in store.query(
            "SELECT variant, seed, run_id FROM experiment_runs").itertuples(index=False)}
    assert [(r["name"], r["action"], r["units"], r["run_id"]) for r in out["runs"]] == [
        ("plan/full/s1", "skip", 0, links[("full", 1)]),
        ("plan/no_stage2/s1", "resume", 7, links[("no_stage2", 1)]),  # score .. evaluate of iteration 1
        ("plan/full/s2", "create", 9, None), ("plan/no_stage2/s2", "create", 9, None)]
    resumed = sum(MEDIAN[s] for s in ("score", "pairs", "train_planner", "evaluate"))  # stage 2 skipped
    created_full = INITIAL_EVALUATE + sum(MEDIAN.values())
    created_no_stage2 = created_full - sum(MEDIAN[s] for s in STAGE2)
    assert out["estimate_s"] == resumed + created_full + created_no_stage2 == 21 + 53 + 41
    assert out["unestimated"] == 0 and out["units"] == 25
    assert out["estimate_from"] == "11 done stages of this experiment"
    assert out["swaps"] == 2  # full/s1 (finished, no table yet) and full/s2 (once it has run)
    assert "1 to resume" in captured.err and "about 1 min 55 s of stage time" in captured.err
    # A larger --iterations: every run has iteration 2 to go, and the finished one resumes.
    assert main(["experiment", "--config", str(config), "--db", str(db), "--dry-run", "--iterations", "2"]) == 0
    wider = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["action"], r["units"]) for r in wider["runs"]] == [("resume", 8), ("resume", 15), ("create", 17),
                                                                   ("create", 17)]
    assert digest(db) == before


def killed_jobs_store(tmp_path: Path) -> tuple[Path, Path]:
    """``(experiment file, store)`` as a ``--jobs N`` command killed while its workers ran leaves them: the main store
    holds the runs of ``DONE`` as they were when their job files were seeded (no stage done), the job files the
    stages done since (full/s1 finished, no_stage2/s1 killed inside score)."""
    from engine.jobs import seed_job_file
    from engine.runner import job_file

    config = experiment_file(tmp_path)
    exp = load_experiment(config)
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        register(store, exp, [1, 2], 1)
        for (variant, seed), stages in DONE.items():
            run_id = ensure_run(store, exp, plan_runs(store, exp, [variant], [seed], 1)[0], 1)
            seed_job_file(store, run_id, job_file(db, run_id))  # as engine.jobs does before starting the worker
            with Store(job_file(db, run_id)) as job:  # what the worker recorded before the kill
                job.write("stages", [{"run_id": run_id, "iteration": t, "stage": stage, "status": "done",
                                      "started_at": START, "finished_at": START + timedelta(seconds=seconds)}
                                     for t, stage, seconds in stages])
                if variant == "no_stage2":
                    job.set_stage(run_id, 1, "score", "running")
        assert store.query("SELECT count(*) AS n FROM stages WHERE status = 'done'")["n"][0] == 0
    return config, db


def test_a_dry_run_after_a_killed_jobs_command_costs_the_stages_its_job_files_record(tmp_path, capsys):
    """``--jobs N`` killed while its workers ran: the main store holds the runs as they were when their job files
    were seeded (no stage done), the job files the stages done since. The real command resumes (or absorbs) the job
    files, so the dry run plans from them -- and, before the fix, still costed from the store alone: "no estimate
    (no done stage in this store)"."""
    config, db = killed_jobs_store(tmp_path)
    files = sorted(db.parent.glob("s.jobs/*"))
    before = {path: digest(path) for path in [db, *files]}
    capsys.readouterr()
    assert main(["experiment", "--config", str(config), "--db", str(db), "--dry-run"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert {path: digest(path) for path in [db, *files]} == before and sorted(db.parent.glob("s.jobs/*")) == files
    assert [(r["name"], r["action"], r["units"]) for r in out["runs"]] == [
        ("plan/full/s1", "skip", 0), ("plan/no_stage2/s1", "resume", 7), ("plan/full/s2", "create", 9),
        ("plan/no_stage2/s2", "create", 9)]
    # The same stages and seconds as the store of the test above: the same estimate.
    assert out["estimate_s"] == 21 + 53 + 41 and out["unestimated"] == 0
    assert out["estimate_from"] == "11 done stages of this experiment"
    assert "about 1 min 55 s of stage time" in captured.err


def test_a_dry_run_says_what_the_command_would_of_a_new_or_recorded_experiment(tmp_path, capsys):
    """The real command notes an edited file that makes a new experiment under a recorded name; the dry run says the
    same (stderr and ``new`` / ``other_definitions``), and that a recorded experiment is recorded."""
    config = experiment_file(tmp_path)
    exp = load_experiment(config)
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        register(store, exp, [1, 2], 1)
    edited = tmp_path / "edited.toml"
    edited.write_text(config.read_text() + '[variants.k4]\nset = ["sample.k=4"]\n')
    capsys.readouterr()
    assert main(["experiment", "--config", str(edited), "--db", str(db), "--dry-run"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    new_id = load_experiment(edited).experiment_id
    assert (out["experiment"], out["new"], out["other_definitions"]) == (new_id, True, [exp.experiment_id])
    assert (f"note: {edited} differs from the definition of experiment(s) {exp.experiment_id}: this is a new "
            f"experiment {new_id}") in captured.err
    assert f"experiment {new_id} (dry run: nothing written; a new experiment)" in captured.err
    assert main(["experiment", "--config", str(config), "--db", str(db), "--dry-run"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert (out["new"], out["other_definitions"]) == (False, [])
    assert "note:" not in captured.err and "nothing written; recorded in this store)" in captured.err
    # a store not made yet: a new experiment, no other definition to note
    assert main(["experiment", "--config", str(edited), "--db", str(tmp_path / "none.duckdb"), "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out["new"], out["other_definitions"]) == (True, [])


def test_a_narrowed_dry_run_counts_the_swap_table_of_a_run_only_a_job_file_finished(tmp_path, capsys):
    """``--variants no_stage2`` after the kill: full/s1, a swap variant left out of the command, is finished in its
    job file only. In this process (``--jobs 1``) the command absorbs every job file of the experiment first, so
    ``swap_finished`` then finds full/s1 finished with no table and computes one: the dry run counts it. ``--jobs 2``
    leaves that job file alone and reads the store, where full/s1 is unfinished: no table. Before, both counted 0."""
    from engine.jobs import absorb_job_files
    from engine.runner import has_swap_table, linked_runs, units_left

    config, db = killed_jobs_store(tmp_path)
    narrowed = ["experiment", "--config", str(config), "--db", str(db), "--dry-run", "--variants", "no_stage2",
                "--seeds", "1"]
    capsys.readouterr()
    assert main(narrowed) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["swaps"] == 1
    assert main([*narrowed, "--jobs", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["swaps"] == 0
    # What the real in-process command sees once it has absorbed the job files: full/s1 finished, no table yet.
    with Store(db) as store:
        absorb_job_files(store, load_experiment(config).experiment_id)
        full = linked_runs(store, load_experiment(config).experiment_id)[("full", 1)]
        assert units_left(store, full, 1) == 0 and not has_swap_table(store, full, 1)
