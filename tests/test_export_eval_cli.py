"""``export`` and ``eval`` on bad or empty input (faults a CLI review found): an exported file gets the mode
``open()`` would give it, not a temp file's 0600; a folder that takes no new file is ``error: --out`` (exit 2), not a
traceback; an iteration that cannot hold the rows asked for (iteration 0's pairs, a DPO iteration's rollouts) is
refused, exit 2, nothing written, while a done stage that kept nothing exports its empty file with a note; ``eval`` on
a split its data has no task of is refused like ``run`` refuses it, before any model loads. No models are trained:
the stores are hand-made (``tests._store_world``) and ``eval`` stops before its agents load."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.store import Store
from tests._store_world import IT, RUN, build_world

ROOT = Path(__file__).resolve().parents[1]
FRESH = "fresh-run"  # a run as the loop leaves it: iteration 0 evaluated, iteration 1's stages recorded, no rows
GRPO = "grpo-run"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        build_world(store)
        for run_id, stages in ((FRESH, {}), (GRPO, {"planner_objective": "grpo"})):
            store.write("runs", [{"run_id": run_id, "name": run_id, "config_json": {"stages": stages},
                                  "run_dir": str(tmp_path / "runs")}])
            store.set_stage(run_id, 0, "evaluate", "done")
            store.set_stage(run_id, 1, "pairs", "done", counts={"pairs": 0})
        store.set_stage(FRESH, 1, "train_planner", "done")
        store.set_stage(GRPO, 1, "train_planner", "running")
    return path


@pytest.fixture
def umask_027() -> Iterator[int]:
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def export(db: Path, run_id: str, iteration: int, what: str, out: Path | str) -> int:
    return main(["export", "--db", str(db), "--run", run_id, "--iteration", str(iteration), "--what", what,
                 "--out", str(out)])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("name", ["p.jsonl", "p.parquet"])
def test_a_new_export_gets_the_mode_open_gives(db, tmp_path, umask_027, name, capsys):
    out = tmp_path / name
    assert export(db, RUN, IT, "pairs", out) == 0
    assert mode(out) == 0o666 & ~umask_027 == 0o640  # mkstemp's 0o600 before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_replaced_export_keeps_the_mode_of_the_file_it_replaces(db, tmp_path, umask_027):
    out = tmp_path / "p.jsonl"
    out.write_text("old\n")
    out.chmod(0o604)
    assert export(db, RUN, IT, "pairs", out) == 0
    assert mode(out) == 0o604 and "old" not in out.read_text()


# A folder that takes no new file for any user, root included (a read-only folder does not stop root): Linux /proc.
# CI runs Linux; elsewhere these tests fail saying so rather than skip.
NO_FILE_FOLDER = Path("/proc")


def _needs_proc() -> None:
    assert (NO_FILE_FOLDER / "self").is_dir(), "needs Linux /proc: a folder that takes no new file, even for root"


def test_a_folder_that_takes_no_file_is_refused_naming_out(db, capsys):
    _needs_proc()
    assert export(db, RUN, IT, "pairs", "/proc/x.jsonl") == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --out: cannot write /proc/x.jsonl: cannot create a file in /proc")
    assert "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize("run_id, iteration, what, says", [
    (FRESH, 0, "pairs", "iteration 0 samples no plans (it only warm-starts and evaluates the agents), so it has no "
                        "pairs"),
    (FRESH, 0, "sft", "iteration 0 grounds no plans"),
    (FRESH, 1, "rollouts", "iteration 1 trained its planner by DPO and its grounder by SFT "
                           "(stages.planner_objective, stages.grounder_objective), so it has no GRPO rollouts"),
    (FRESH, 1, "sft", "iteration 1 has no SFT records: its ground stage has not run (`python -m engine step ground "
                      f"--run {FRESH} --iteration 1`)"),
    (GRPO, 1, "rollouts", "iteration 1 has no GRPO rollouts: its train_planner stage is still running"),
])
def test_an_iteration_that_cannot_hold_the_rows_is_refused(db, tmp_path, capsys, run_id, iteration, what, says):
    folder = tmp_path / "out"
    folder.mkdir()
    assert export(db, run_id, iteration, what, folder / "out.jsonl") == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --iteration {iteration} --what {what}: ")
    assert says in captured.err and captured.err.rstrip().endswith("nothing written")
    assert captured.out == "" and list(folder.iterdir()) == []


@pytest.mark.parametrize("run_id, what", [(FRESH, "pairs"), (GRPO, "pairs")])
def test_a_done_stage_that_kept_nothing_exports_an_empty_file_with_a_note(db, tmp_path, capsys, run_id, what):
    out = tmp_path / "out.jsonl"
    assert export(db, run_id, 1, what, out) == 0
    captured = capsys.readouterr()
    assert out.read_text() == "" and f"wrote 0 {what} rows" in captured.out
    assert captured.err.startswith(f"note: 0 {what} rows: iteration 1 made its {what}")


def test_pairs_all_excluded_by_curation_are_an_empty_export_not_a_refusal(db, tmp_path, capsys):
    from engine import curation

    with Store(db) as store:
        for task_id in ("m1", "m2", "q1"):
            curation.exclude_pair(store, RUN, IT, task_id, 0)
    out = tmp_path / "out.jsonl"
    assert export(db, RUN, IT, "pairs", out) == 0  # iteration 0 of the hand-made world has pairs: curation's choice
    assert out.read_text() == "" and "note: 0 pairs rows" in capsys.readouterr().err


@pytest.fixture
def train_only(tmp_path: Path, demo_tasks) -> Path:
    from engine.tasks import write_tasks

    path = tmp_path / "train_only.jsonl"
    write_tasks([t for t in demo_tasks if t.split == "train"][:4], path)
    return path


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval`` must refuse before it loads an agent: loading one fails the test."""
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("eval loaded a model")

    monkeypatch.setattr("engine.runtime.load_agent", refuse)


def evaluate(*argv: str) -> int:
    return main(["eval", "--config", str(ROOT / "examples" / "demo.toml"), *argv])


def test_eval_refuses_a_split_its_data_has_no_task_of(train_only, no_models, capsys):
    assert evaluate("--set", f"data.tasks={train_only}", "--split", "held_out") == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --split: no 'held_out' task in {train_only} (its splits: train)")
    assert captured.out == "" and "Traceback" not in captured.err


def test_eval_refuses_a_config_split_its_data_has_no_task_of(train_only, no_models, capsys):
    assert evaluate("--set", f"data.tasks={train_only}", "--set", 'evaluate.splits=["held_in"]') == 2
    assert capsys.readouterr().err.startswith(f"error: evaluate.splits: no 'held_in' task in {train_only}")


def test_eval_refuses_a_traces_folder_that_takes_no_file_before_loading_models(train_only, no_models, capsys):
    _needs_proc()
    assert evaluate("--set", f"data.tasks={train_only}", "--split", "train", "--traces", "/proc/t.jsonl") == 2
    assert capsys.readouterr().err.startswith("error: --traces: cannot write /proc/t.jsonl: cannot create a file")


def test_a_file_where_the_folder_should_be_is_named_as_such(db, tmp_path, capsys):
    """``--out a-file/x.jsonl`` said "the directory ... does not exist" of a path that exists (as a file)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    with pytest.raises(SystemExit) as exit_:
        export(db, RUN, IT, "pairs", blocker / "x.jsonl")
    assert exit_.value.code == 2
    assert f"the directory of {blocker / 'x.jsonl'} is a file, not a folder" in capsys.readouterr().err
    assert blocker.read_text() == "not a folder\n"


def test_an_sft_export_notes_the_original_rows_training_mixes_in_beside_it(db, tmp_path, capsys):
    """train_grounder mixes original (warm-start) rows in beside the exported records (``sft.original_ratio``); the
    file does not hold them, and the CLI said nothing of them (the studio's Export tab did): a ``note:`` on stderr now
    says what the config will mix in, or, once the stage has trained, how many rows it mixed in."""
    import json

    out = tmp_path / "sft.jsonl"
    assert export(db, RUN, IT, "sft", out) == 0  # the world's config is the defaults: sft.original_ratio = -1
    captured = capsys.readouterr()
    assert captured.out.startswith("wrote ") and "original" not in captured.out
    assert ("note: not in the file: the original (warm-start) rows train_grounder will mix in beside these records "
            "(sft.original_ratio = -1: all of them)\n") in captured.err
    with Store(db) as store:
        store.set_stage(RUN, IT, "train_grounder", "done", counts={"rows": 480, "new_rows": 96, "original_rows": 384})
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "sft", "--out", str(out),
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"] == len(out.read_text().splitlines())  # stdout stays one JSON object
    assert captured.err == ("note: not in the file: the 384 original (warm-start) rows train_grounder mixed in beside "
                            "these records (sft.original_ratio)\n")
    assert export(db, RUN, IT, "pairs", tmp_path / "pairs.jsonl") == 0  # pairs: nothing is mixed in
    assert "original" not in capsys.readouterr().err
