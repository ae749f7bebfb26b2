"""Usage mistakes on the command line are refused by argparse (exit 2, the flag named) before any work, not a
Python traceback after it; ``export`` refuses an iteration the run does not have and reads the format from the file's
name (a CLI review found each of these as a traceback, an empty file or JSONL inside a ``.parquet``)."""

from __future__ import annotations

import pandas as pd
import pytest

from engine.__main__ import main


@pytest.mark.parametrize("argv, flag, says", [
    (["eval", "--limit", "-5"], "--limit", "must be 0 or more"),
    (["eval", "--traces", "no-such-dir/t.jsonl"], "--traces", "does not exist"),
    (["eval", "--traces", "."], "--traces", "is a directory"),
    (["merge", "assets/demo/planner", "--out", "x", "--dtype", "float33"], "--dtype", "invalid choice"),
    (["bench", "score", "--device", "gpu7"], "--device", "is not cpu, cuda or cuda:N"),
    (["bench", "score", "--repeats", "0"], "--repeats", "must be 1 or more"),
    (["demo-world", "--qa-world", "huge"], "--qa-world", "invalid choice"),
    (["demo-world", "--maths-train", "-5"], "--maths-train", "must be 0 or more"),
    (["export", "--db", "x", "--run", "r", "--iteration", "1", "--what", "pairs", "--out", "."], "--out",
     "is a directory"),
])
def test_a_usage_mistake_is_refused_before_any_work(argv, flag, says, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and flag in err and says in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, says", [
    # An abbreviation is refused: `run --iteration 1` meant "do iteration 1" and re-targeted a run to one iteration.
    # ... and not pointed at --iterations, which would re-target the run, but at `step` (one iteration's stage)
    (["run", "--run", "r", "--iteration", "1"], "unrecognized arguments: --iteration 1; run has no --iteration: to "
     "run one stage of iteration N use `python -m engine step STAGE --run ID --iteration N`"),
    (["run", "--run", "r", "--iteratons", "1"], "unrecognized arguments: --iteratons 1; did you mean --iterations?"),
    (["export", "--db", "x", "--run", "r", "--iteration", "1", "--iter", "2", "--what", "pairs", "--out", "p.jsonl"],
     "unrecognized arguments: --iter 2"),
    (["status", "--db", "x", "--jsn"], "unrecognized arguments: --jsn; did you mean --json?"),
])
def test_an_unknown_or_abbreviated_flag_is_refused_with_the_commands_own_usage(argv, says, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and says in err, err
    assert err.startswith(f"usage: python -m engine {argv[0]} ")  # the command's usage, not the list of commands


@pytest.mark.parametrize("extra, says", [
    (["--out", "pairs.csv"], "a .csv file is neither JSONL nor Parquet"),
    (["--out", "pairs.jsonl", "--format", "parquet"], "--format parquet would write parquet into pairs.jsonl"),
])
def test_export_refuses_a_file_name_that_disagrees_with_its_format(tmp_path, extra, says, capsys):
    """`--out pairs.csv` wrote JSONL, and `--format parquet --out x.jsonl` Parquet, without a word."""
    from engine.store import Store
    from tests._store_world import IT, RUN, build_world

    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        build_world(store)
    extra = [str(tmp_path / e) if e.startswith("pairs.") else e for e in extra]
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", *extra]) == 2
    assert says.replace("pairs.jsonl", str(tmp_path / "pairs.jsonl")) in capsys.readouterr().err
    assert not list(tmp_path.glob("pairs.*"))


def test_export_refuses_a_missing_iteration_and_takes_parquet_from_the_name(tmp_path, capsys):
    from engine.store import Store
    from tests._store_world import IT, RUN, build_world

    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        build_world(store)
        its = store.iterations(RUN)
    out = tmp_path / "pairs.jsonl"
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", "9", "--what", "pairs",
                 "--out", str(out)]) == 2
    assert f"run {RUN!r} has no iteration 9 (its iterations: {', '.join(map(str, its))})" in capsys.readouterr().err
    assert not out.exists()
    parquet = tmp_path / "sft.parquet"
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "sft",
                 "--out", str(parquet)]) == 0
    assert "(parquet)" in capsys.readouterr().out and len(pd.read_parquet(parquet)) > 0
