"""Faults a new user's walk through ``python -m engine`` found (the CLI audit of 2026-12-07), each pinned:

* ``status`` and ``export`` required ``--db`` where every other command defaults to ``runs/studio.duckdb``;
* ``status --json`` called the workdir ``run_dir`` while its text listing showed the run's own folder as ``dir=``;
  ``run``'s last line nested a whole run object under ``"iterations"``;
* a TOML syntax error said ``FILE: <toml>: ... (at line L, column C)``, not ``FILE:LINE:`` as every other error; a
  folder given as ``--db`` printed DuckDB's "IO Error"; a file DuckDB takes for another type quoted DuckDB's
  "Cannot launch in-memory database in read-only mode";
* ``report --experiment`` given a run's id said only "no experiment";
* ``demo-world``'s flags said nothing but their defaults.

Hand-made stores (``tests._store_world``); no model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import build_parser, main
from engine.store import Store
from tests._store_world import RUN, build_world


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        build_world(store)
    return path


def test_status_and_export_default_to_the_store_every_command_uses(db, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    db.rename(tmp_path / "runs" / "studio.duckdb")
    assert main(["status", "--json"]) == 0
    assert RUN in json.loads(capsys.readouterr().out)["runs"]
    out = tmp_path / "pairs.jsonl"
    assert main(["export", "--run", RUN, "--iteration", "0", "--what", "pairs", "--out", str(out)]) == 0
    assert out.read_text().count("\n") == 3
    (tmp_path / "runs" / "studio.duckdb").unlink()
    assert main(["status"]) == 2
    assert "no store at runs/studio.duckdb (the default: use --db to pick one)" in capsys.readouterr().err


def test_status_json_names_the_workdir_and_the_runs_own_folder(db, capsys):
    assert main(["status", "--db", str(db), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][RUN]
    assert run["workdir"] == run["run_dir"] == "runs/world"  # run_dir kept for scripts that read it
    assert run["directory"] == str(Path("runs/world") / RUN)
    assert main(["status", "--db", str(db)]) == 0
    assert f"dir={run['directory']}" in capsys.readouterr().out  # the text listing and the JSON agree


def test_a_toml_syntax_error_is_located_as_file_and_line(tmp_path, capsys):
    config = tmp_path / "broken.toml"
    config.write_text("[sample]\nk = 3\nfoo bar\n")
    assert main(["run", "--config", str(config), "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {config}:3: <toml>: ") and err.endswith("(column 5)") and "at line" not in err
    assert not (tmp_path / "x.duckdb").exists()


def test_a_folder_or_another_kind_of_file_as_the_store_is_said_plainly(tmp_path, capsys):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert main(["status", "--db", str(folder)]) == 3
    assert capsys.readouterr().err.strip() == (f"error: {folder} is a folder, not a store file; use --db with a "
                                               ".duckdb file (a new name creates a store)")
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"a": 1}\n')
    assert main(["status", "--db", str(jsonl)]) == 3
    err = capsys.readouterr().err
    assert "is not a DuckDB database, so not a MOAT Studio store" in err and "Catalog Error" not in err
    assert "in-memory" not in err


def test_report_given_a_runs_id_points_to_status_and_swap(db, capsys):
    assert main(["report", "--db", str(db), "--experiment", RUN]) == 2
    err = capsys.readouterr().err
    assert f"({RUN} is a run: `python -m engine status --db {db}`" in err
    assert f"`python -m engine swap --db {db} --run {RUN}`" in err
    assert main(["report", "--db", str(db), "--experiment", "nothing-like-it"]) == 2
    assert "is a run" not in capsys.readouterr().err


def test_every_demo_world_flag_says_what_it_does():
    parser = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    world = parser.choices["demo-world"]
    for action in world._actions:
        if action.option_strings and action.dest != "help":
            words = (action.help or "").split("(default")[0].strip()
            assert len(words) > 10, f"{action.option_strings[0]}: {action.help!r}"


def test_json_output_is_strict_json_with_no_nan_or_infinity(capsys):
    """``json.dumps`` writes NaN and Infinity, which are no JSON: an infinite log-PPL in ``swap --json`` (or an
    interval over no values) made the line unreadable to ``jq`` and to ``json.loads(..., parse_constant=...)``."""
    from engine.commands._common import print_json

    print_json({"gold_logppl": float("inf"), "ci95": [float("nan"), 0.5], "cells": ({"p": float("-inf")},), "n": 3})
    line = capsys.readouterr().out

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the output: {line}")

    expected = {"gold_logppl": None, "ci95": [None, 0.5], "cells": [{"p": None}], "n": 3}
    assert json.loads(line, parse_constant=refuse) == expected
