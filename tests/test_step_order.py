"""``python -m engine step``: a stage runs by itself only once the stages whose data it reads are done or skipped
(``engine.loop.out_of_order``); an unknown run or a missing store is refused without creating anything.

Before, ``step critique --iteration 2`` on a run whose iteration 2 was never sampled recorded critique "done" with 0
rows, and a later ``run`` skipped it: an iteration that trained nothing (CLI review)."""

from __future__ import annotations

import pytest

from engine.__main__ import main
from engine.loop import out_of_order, run_config
from engine.store import Store


@pytest.fixture
def created_run(tiny_run):
    """A run that has run nothing yet: ``(db, run_id)``."""
    return tiny_run("run.iterations=2")


def _stages(db, run_id: str, iteration: int) -> dict:
    with Store(db) as store:
        return store.stage_status(run_id, iteration)


def test_a_stage_whose_inputs_are_not_there_is_refused_and_records_nothing(created_run, capsys):
    db, run_id = created_run
    base = ["--run", run_id, "--db", str(db), "--quiet"]
    assert main(["step", "critique", "--iteration", "1", *base]) == 2
    err = capsys.readouterr().err
    assert "critique of iteration 1 reads what ground of iteration 1 writes" in err
    # the commands it suggests paste as they are (--db kept); the loop's never shortens the run to this iteration
    assert f"python -m engine step ground --run {run_id} --db {db} --iteration 1` first" in err
    assert f"`python -m engine run --run {run_id} --db {db}` for every pending stage in order (iterations 0-2)" in err
    assert main(["step", "sample", "--iteration", "4", *base]) == 2
    assert f"`python -m engine run --run {run_id} --db {db} --iterations 4` to extend the run (it has 2 iterations)" \
        in capsys.readouterr().err
    assert main(["step", "sample", "--iteration", "2", *base]) == 2  # iteration 1's planner is not trained yet
    assert "train_planner of iteration 1" in capsys.readouterr().err
    assert main(["step", "critique", "--iteration", "-1", *base]) == 2
    assert "0 or more" in capsys.readouterr().err
    assert main(["step", "sample", "--iteration", "0", *base]) == 2
    assert "iteration 0 has no sample stage (its stages: evaluate)" in capsys.readouterr().err
    assert _stages(db, run_id, 1) == {} and _stages(db, run_id, 2) == {} and _stages(db, run_id, -1) == {}
    # what the loop's order allows: iteration 1's sample (the configured planner), then its score
    assert main(["step", "sample", "--iteration", "1", *base]) == 0
    assert _stages(db, run_id, 1)["sample"]["status"] == "done"
    with Store(db) as store:
        config = run_config(store, run_id)
        assert out_of_order(store, run_id, 1, "score", config) is None
        assert "score of iteration 1" in out_of_order(store, run_id, 1, "pairs", config)
        store.set_stage(run_id, 1, "critique", "skipped")  # skipped counts as done for what follows
        assert "ground of iteration 1" in out_of_order(store, run_id, 1, "train_grounder", config)


def test_an_unknown_run_or_store_is_refused_without_creating_a_store(created_run, tmp_path, capsys):
    db, run_id = created_run
    assert main(["step", "sample", "--run", "nope", "--iteration", "1", "--db", str(db)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    missing = tmp_path / "elsewhere" / "none.duckdb"
    assert main(["step", "sample", "--run", run_id, "--iteration", "1", "--db", str(missing)]) == 2
    assert "no store at" in capsys.readouterr().err and not missing.parent.exists()
