"""Export: curated pairs and SFT records in JSONL and Parquet load with ``datasets`` and match the store."""

from __future__ import annotations

import argparse

import datasets
import pytest

from engine import curation
from engine.commands import export as export_command
from engine.export import export_pairs, export_sft
from engine.prompts import grounder_messages
from engine.store import Store
from tests._store_world import IT, RUN, TASKS, add_iterative_step, build_world, prompt_of

LOADER = {"jsonl": "json", "parquet": "parquet"}


def main(argv: list[str]) -> int:
    """Run the ``export`` command alone (the full CLI imports every command module, some owned elsewhere)."""
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    return export_command.run(parser.parse_args(argv[1:]))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        yield s


def load(path, fmt, tmp_path) -> list[dict]:
    ds = datasets.load_dataset(LOADER[fmt], data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    return ds.to_list()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_pairs_loads_and_matches(store, tmp_path, fmt):
    curation.exclude_pair(store, RUN, IT, "m2", 0)
    curation.swap_pair(store, RUN, IT, "q1", 0)
    path = tmp_path / "out" / f"pairs.{fmt}"
    assert export_pairs(store, RUN, IT, path, fmt) == 2
    rows = load(path, fmt, tmp_path)
    by_id = {t.id: t for t in TASKS}
    assert [r["task_id"] for r in rows] == ["m1", "q1"]
    assert rows[0] == {
        "prompt": prompt_of(by_id["m1"]),
        "chosen": "Subgoal 1: Multiply 3 by 4.; Subgoal 2: Add 5.",
        "rejected": "Subgoal 1: Guess.",
        "chosen_logppl": 0.5,
        "rejected_logppl": 2.0,
        "task_id": "m1",
        "step": 0,
    }
    assert (rows[1]["chosen"], rows[1]["chosen_logppl"]) == ("Subgoal 1: Ask someone.", 0.9)  # swapped
    assert not list(path.parent.glob("*.tmp"))  # the temp file was renamed away


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_sft_loads_and_matches(store, tmp_path, fmt):
    curation.edit_correction(store, RUN, IT, "q1", 0, 0, "R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], born?)")
    path = tmp_path / f"sft.{fmt}"
    assert export_sft(store, RUN, IT, path, fmt) == 3
    rows = load(path, fmt, tmp_path)
    by_id = {t.id: t for t in TASKS}
    assert [r["task_id"] for r in rows] == ["m1", "m2", "q1"]
    assert rows[0]["messages"] == grounder_messages(
        by_id["m1"], ["Multiply 3 by 4.", "Add 5."], ["R1 = Calculator(3*4); R2 = Calculator(R1+5)"]
    )
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": "R1 = Calculator(10-4); R2 = Calculator(R1*2)"}
    assert "Subgoal 2: Double it." in rows[1]["messages"][0]["content"]  # the critic's corrected subgoals
    assert rows[2]["messages"][-1]["content"] == "R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], born?)"


def test_an_iterative_step_exports_in_the_layout_it_trained_on(store, tmp_path):
    """A step >= 1 record carries the gold history before it (its R1 is defined), as train_grounder renders it."""
    from engine.outcome import gold_step_results
    from engine.turns import grounding_messages

    add_iterative_step(store, 2)
    path = tmp_path / "sft.jsonl"
    assert export_sft(store, RUN, IT, path) == 3  # q1's verdict is unfixable: no record
    rows = load(path, "jsonl", tmp_path)
    assert [(r["task_id"], r["step"], r["k"]) for r in rows] == [("m1", 0, 0), ("m1", 2, 0), ("m2", 0, 0)]
    task = TASKS[0]
    assert rows[1]["messages"] == grounding_messages(task, 2, [task.gold_subgoals[1]], gold_step_results(task),
                                                     "R2 = Calculator(R1+5)")
    text = " ".join(m["content"] for m in rows[1]["messages"])
    assert "R1 = Calculator(3*4)" in text and rows[1]["messages"][-1]["content"] == "R2 = Calculator(R1+5)"


def test_the_export_line_says_what_curation_left_out(store, tmp_path, capsys):
    """"Exported 92 pairs rows" out of 93 left the reader to guess which one was missing and why."""
    from engine.export import left_out

    assert left_out(store, RUN, IT, "pairs") == "" and left_out(store, RUN, IT, "rollouts") == ""
    assert left_out(store, RUN, IT, "sft") == "1 verdict(s) with no record (unfixable, or dropped by a curator)"
    curation.tie_pair(store, RUN, IT, "m1", 0)
    curation.exclude_pair(store, RUN, IT, "m2", 0)
    curation.tie_pair(store, RUN, IT, "q1", 0)
    assert left_out(store, RUN, IT, "pairs") == "2 tied, 1 excluded"
    db = store.path
    store.close()
    out = tmp_path / "p.jsonl"
    assert main(["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--out",
                 str(out)]) == 0
    assert capsys.readouterr().out.endswith("; left out: 2 tied, 1 excluded\n")


def test_bad_format_and_overwrite(store, tmp_path):
    with pytest.raises(ValueError, match="format"):
        export_pairs(store, RUN, IT, tmp_path / "x.csv", "csv")
    path = tmp_path / "p.jsonl"
    path.write_text("old\n")
    assert export_pairs(store, RUN, IT, path) == 3
    assert "old" not in path.read_text() and len(path.read_text().splitlines()) == 3


def test_export_cli(tmp_path, capsys):
    db = tmp_path / "ws.duckdb"
    with Store(db) as s:
        build_world(s)
    out = tmp_path / "sft.parquet"
    argv = ["export", "--db", str(db), "--run", RUN, "--iteration", "0", "--what", "sft", "--format", "parquet"]
    assert main([*argv, "--out", str(out), "--json"]) == 0
    assert '"rows": 2' in capsys.readouterr().out
    assert len(load(out, "parquet", tmp_path)) == 2
    assert (
        main(
            [
                "export",
                "--db",
                str(db),
                "--run",
                "nope",
                "--iteration",
                "0",
                "--what",
                "pairs",
                "--out",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 2
    )
    assert "no run 'nope'" in capsys.readouterr().err
