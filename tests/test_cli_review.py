"""CLI faults found by a second review, each fixed with a clear refusal and no traceback:

* A store that cannot be used (not a DuckDB file, held by another process, a newer schema) is one ``error:`` line on
  stderr and exit 3 from every command that opens one; ``status`` and ``report`` said 2, ``run``, ``step`` and
  ``swap`` printed it on stdout (where scripts read the JSON).
* ``step --critic/--base-url/--model`` on a critique that is done already was silently ignored (the endpoint never
  called, exit 0); on another stage it was ignored too. Both are refused now.
* ``merge`` of a folder that is not a model, or from a store it cannot open, ended in a traceback.
* ``bench --device cuda`` on a machine without CUDA was an AssertionError from torch; ``--contention -3`` ran as 0.
* ``execute --time-limit -1`` or ``nan`` ran.
* A reader that goes away (``| head``) gave a BrokenPipeError traceback; it now ends with status 141, silently.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import EXIT_BROKEN_PIPE, main
from engine.store import Store

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def not_a_store(tmp_path) -> Path:
    path = tmp_path / "notes.duckdb"
    path.write_text("these are my notes, not a store\n")
    return path


@pytest.mark.parametrize("command", [
    ["status"], ["report", "--experiment", "x"], ["run", "--run", "x", "--quiet"],
    ["step", "sample", "--run", "x", "--iteration", "1", "--quiet"], ["swap", "--run", "x"],
    ["merge", "--run", "x", "--iteration", "1", "--role", "planner", "--out", "{tmp}/merged"],
    ["export", "--run", "x", "--iteration", "1", "--what", "pairs", "--out", "{tmp}/merged"],
])
def test_every_command_says_a_store_cannot_be_used_on_stderr_with_exit_3(command, not_a_store, tmp_path, capsys):
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command] + ["--db", str(not_a_store)]
    assert main(argv) == 3
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is for the command's JSON
    assert captured.err.startswith(f"error: {not_a_store} is not a DuckDB database")
    assert not_a_store.read_text() == "these are my notes, not a store\n" and not (tmp_path / "merged").exists()


def test_a_store_held_by_another_process_is_exit_3_on_stderr_for_status(tmp_path):
    db = tmp_path / "held.duckdb"
    with Store(db):  # this process holds it
        out = subprocess.run([sys.executable, "-m", "engine", "status", "--db", str(db), "--json"],
                             capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 3 and out.stdout == "" and "open in another process" in out.stderr


def test_step_refuses_critic_overrides_that_would_change_nothing(tiny_run, capsys):
    db, run_id = tiny_run(stages=("sample", "score", "pairs", "train_planner", "ground", "critique"))
    with Store(db) as store:
        verdicts = store.count("verdicts", run_id)
    url = "http://127.0.0.1:9/v1"  # nothing listens: it must not be called
    assert main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--critic", "openai",
                 "--base-url", url, "--model", "m", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "critique of iteration 1 is done already" in err and "critic.backend = reference" in err
    assert main(["step", "train_grounder", "--run", run_id, "--iteration", "1", "--db", str(db),
                 "--model", "m", "--quiet"]) == 2
    assert "--model apply to the critique stage only, not train_grounder" in capsys.readouterr().err
    with Store(db) as store:
        assert store.count("verdicts", run_id) == verdicts
        assert store.stage_status(run_id, 1)["critique"]["status"] == "done"
        assert "train_grounder" not in store.stage_status(run_id, 1)


def test_merge_of_a_folder_that_is_not_a_model_is_refused(tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("not a model")
    assert main(["merge", str(folder), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder} is not a model checkpoint this engine can load") and "Traceback" not in err
    assert not (tmp_path / "merged").exists() and not (tmp_path / "merged.partial").exists()


def test_bench_refuses_a_cuda_device_this_machine_lacks_and_negative_contention(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.fail("this test checks the refusal on a machine without CUDA; it needs a CPU-only machine")
    assert main(["bench", "score", "--size", "tiny", "--repeats", "1", "--device", "cuda"]) == 2
    assert "error: --device: 'cuda' requested but this machine has 0 CUDA device(s)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["bench", "score", "--contention", "-3"])
    assert info.value.code == 2 and "--contention: must be 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("limit", ["-1", "0", "nan", "inf", "soon"])
def test_execute_refuses_a_time_limit_that_is_not_a_positive_number(limit, capsys):
    with pytest.raises(SystemExit) as info:
        main(["execute", "--domain", "maths", "--actions", "R1 = Calculator(3*4)", "--time-limit", limit])
    assert info.value.code == 2 and "--time-limit" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "engine", "execute", "--domain", "maths", "--actions",
                             "R1 = Calculator(3*4)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.close()  # before the command writes its JSON: like `| head -0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, err
    assert err == ""
    ok = subprocess.run([sys.executable, "-m", "engine", "execute", "--domain", "maths", "--actions",
                         "R1 = Calculator(3*4)"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True


@pytest.mark.parametrize("command", [["status"], ["report", "--experiment", "x"],
                                     ["export", "--run", "x", "--iteration", "1", "--what", "pairs",
                                      "--out", "p.jsonl"],
                                     ["step", "sample", "--run", "x", "--iteration", "1"],
                                     # swap and merge said "<db> does not exist", in their own words
                                     ["swap", "--run", "x"],
                                     ["merge", "--run", "x", "--iteration", "1", "--role", "planner",
                                      "--out", "{tmp}/merged"]])
def test_a_missing_store_is_bad_input_exit_2_and_is_not_created(command, tmp_path, capsys):
    missing = tmp_path / "none.duckdb"
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command]
    assert main([*argv, "--db", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: no store at {missing}\n" and not missing.exists() and not (tmp_path / "merged").exists()
