"""``demo-models`` and ``demo-world`` refuse bad input before any work (``error: --flag: ...`` on stderr, exit 2,
nothing written), and an interrupted ``demo-models`` leaves ``--out`` as it was (exit 130, one line, no traceback).

A review found each as a fault: ``--layers 0 --planner-steps -1`` trained a 0-layer planner, ``--roles bogus`` was a
traceback after the task suite had loaded, a bad ``--planner-styles`` or ``demo-world --pool-only`` alone exited 1,
and Ctrl-C left ``--out`` half-built (a new planner beside no grounder and no ``build.json``). No test here trains:
the builds swap TRL's trainer for one that returns the model as it is, or raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from engine.__main__ import main

# The smallest build the checks allow: a tokenizer on 4 tasks and a 1-layer model, saved in well under a second.
TINY = ["--hidden-size", "8", "--heads", "2", "--layers", "1", "--intermediate-size", "8", "--max-positions", "512",
        "--batch-size", "2", "--micro-batches", "1", "--max-train-tasks", "4", "--planner-steps", "1",
        "--grounder-steps", "1", "--joint-steps", "1", "--bf16", "false"]


def exit_status(argv: list[str]) -> int:
    """``main``'s status whether the command returns it or raises ``SystemExit`` (argparse and usage errors do)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def interrupted_status(argv: list[str]) -> int:
    """``main``'s status for a run that meets Ctrl-C; a ``KeyboardInterrupt`` escaping it (the shell's traceback)
    fails the test here instead of stopping pytest itself."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main: a traceback, not exit status 130")


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (``None`` for a directory): a leftover sibling shows up too."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the command starts its work: loading or generating the task suite, or building."""
    def started(*_args, **_kwargs):
        raise AssertionError("the command started work before refusing its input")

    monkeypatch.setattr("engine.tasks.load_tasks", started)
    monkeypatch.setattr("engine.demo.world.generate_suite", started)
    monkeypatch.setattr("engine.demo.agents.build_demo_agents", started)
    monkeypatch.setattr("engine.demo.agents.build_joint_agent", started)


@pytest.mark.parametrize("args, flag", [
    (["--layers", "0", "--planner-steps", "-1"], "--layers"),
    (["--planner-steps", "-1"], "--planner-steps"),
    (["--planner-steps", "0"], "--planner-steps"),  # max_steps 0 trains by epochs: not zero steps
    (["--grounder-steps", "0"], "--grounder-steps"),
    (["--joint-steps", "0"], "--joint-steps"),
    (["--hidden-size", "0"], "--hidden-size"),
    (["--heads", "0"], "--heads"),
    (["--hidden-size", "30"], "--heads"),  # 30 does not split into 4 heads of an even width
    (["--intermediate-size", "0"], "--intermediate-size"),
    (["--max-positions", "0"], "--max-positions"),
    (["--vocab-size", "0"], "--vocab-size"),
    (["--batch-size", "0"], "--batch-size"),
    (["--micro-batches", "0"], "--micro-batches"),
    (["--micro-batches", "5"], "--micro-batches"),
    (["--group-by-length"], "--group-by-length"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--learning-rate", "-0.001"], "--learning-rate"),
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--learning-rate", "inf"], "--learning-rate"),
    (["--max-train-tasks", "-1"], "--max-train-tasks"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**32)], "--seed"),
    (["--roles", "bogus"], "--roles"),
    (["--roles", ","], "--roles"),
    (["--roles", "planner"], "--tokenizer-from"),  # one agent alone needs its partner's tokenizer
    (["--tokenizer-from", "no/such/agent"], "--tokenizer-from"),
    (["--planner-styles", "concise=1"], "--planner-styles"),
    (["--planner-styles", "vague=-1"], "--planner-styles"),
    (["--joint-from", "no/such/agent"], "--joint-from"),
])
def test_demo_models_refuses_a_bad_flag_before_any_work(args, flag, tmp_path, capsys, no_work):
    out = tmp_path / "out"
    assert exit_status(["demo-models", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # neither --out nor a partial directory beside it


def test_demo_models_refuses_an_out_that_is_a_file_and_a_tasks_file_without_train_tasks(tmp_path, capsys,
                                                                                          demo_tasks):
    from engine.tasks import write_tasks

    (tmp_path / "file").write_text("x")
    assert exit_status(["demo-models", "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.startswith("error: --out: ")
    held_out = tmp_path / "held_out.jsonl"
    write_tasks([t for t in demo_tasks if t.split == "held_out"], held_out)
    before = snapshot(tmp_path)
    assert exit_status(["demo-models", "--out", str(tmp_path / "out"), "--tasks", str(held_out), *TINY]) == 2
    assert capsys.readouterr().err.startswith("error: --tasks: ")
    assert snapshot(tmp_path) == before


def test_check_build_config_refuses_every_bounded_field_just_outside_its_range():
    """Every number ``AgentBuildConfig`` declares a range for is checked, so a new field with a bound is too."""
    from engine.demo.agents import AgentBuildConfig, BuildConfigError, check_build_config

    check_build_config(AgentBuildConfig())
    bounded = 0
    for f in dataclasses.fields(AgentBuildConfig):
        meta = f.metadata
        for key, bad in (("ge", lambda b: b - 1), ("gt", lambda b: b), ("le", lambda b: b + 1), ("lt", lambda b: b)):
            if meta.get(key) is None:
                continue
            bounded += 1
            value = type(f.default)(bad(meta[key]))
            with pytest.raises(BuildConfigError) as info:
                check_build_config(dataclasses.replace(AgentBuildConfig(), **{f.name: value}))
            assert info.value.field == f.name, (f.name, value, info.value)
    assert bounded >= 16  # seed and learning rate (both ends), 3 step counts, 6 sizes, batch, micro-batches, sample
    with pytest.raises(BuildConfigError, match="learning_rate nan"):
        check_build_config(AgentBuildConfig(learning_rate=math.nan))


def test_demo_world_refuses_a_pool_without_a_size_and_other_bad_input_with_exit_2(tmp_path, capsys, no_work):
    out = tmp_path / "pool.jsonl"
    assert exit_status(["demo-world", "--pool-only", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pool-only: ") and err.count("\n") == 1 and "--pool-maths" in err, err
    assert exit_status(["demo-world", "--distractor-percent", "150", "--out", str(out)]) == 2
    assert "--distractor-percent" in capsys.readouterr().err
    assert exit_status(["demo-world", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --out: ")
    assert list(tmp_path.iterdir()) == []


# --- Ctrl-C and atomicity -------------------------------------------------------------------------------------


@pytest.fixture
def tasks_file(tmp_path, demo_tasks) -> Path:
    from engine.tasks import write_tasks

    path = tmp_path / "tasks.jsonl"
    write_tasks(demo_tasks, path)
    return path


def fake_trainer(monkeypatch, interrupt_on: int | None) -> list[int]:
    """Replace TRL's SFT with one that returns the model untrained, raising ``KeyboardInterrupt`` (Ctrl-C) on call
    number ``interrupt_on`` (1: the first role, before anything is saved; 2: after the planner is saved)."""
    calls: list[int] = []

    def sft_train(model, tokenizer, rows, settings, **_kwargs):
        calls.append(len(rows))
        if len(calls) == interrupt_on:
            raise KeyboardInterrupt
        return model, [{"loss": 1.0}]

    monkeypatch.setattr("engine.training.sft_train", sft_train)
    return calls


def previous_build(out: Path, tasks_file: Path, monkeypatch) -> None:
    """A complete (untrained) build in ``out`` plus a file of the user's, as a rebuild finds ``assets/demo``."""
    fake_trainer(monkeypatch, interrupt_on=None)
    assert main(["demo-models", "--out", str(out), "--tasks", str(tasks_file), *TINY]) == 0
    (out / "NOTES.md").write_text("mine\n")


@pytest.mark.parametrize("interrupt_on", [1, 2])
def test_ctrl_c_leaves_a_new_out_absent(interrupt_on, tmp_path, tasks_file, monkeypatch, capsys):
    calls = fake_trainer(monkeypatch, interrupt_on)
    before = snapshot(tmp_path)
    assert interrupted_status(["demo-models", "--out", str(tmp_path / "out"), "--tasks", str(tasks_file),
                               *TINY]) == 130
    assert len(calls) == interrupt_on
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "Ctrl-C" in line] == \
        [f"demo-models: stopped by Ctrl-C; {tmp_path / 'out'} left as it was"]
    assert snapshot(tmp_path) == before  # no --out, no <out>.partial-<pid>


@pytest.mark.parametrize("roles", [[], ["--roles", "planner"], ["--roles", "grounder"]])
def test_ctrl_c_leaves_an_existing_out_as_it_was(roles, tmp_path, tasks_file, monkeypatch, capsys):
    """An interrupted rebuild of a complete --out, whole or one role against the tokenizer of an agent inside it
    (``--tokenizer-from OUT/grounder``), changes no byte of it."""
    out = tmp_path / "out"
    previous_build(out, tasks_file, monkeypatch)
    before = snapshot(tmp_path)
    interrupt_on = 2 if not roles else 1  # the last role built: everything before it was written
    calls = fake_trainer(monkeypatch, interrupt_on)
    tokenizer = ["--tokenizer-from", str(out / "grounder")] if roles else []
    assert interrupted_status(["demo-models", "--out", str(out), "--tasks", str(tasks_file), *TINY, *roles,
                               *tokenizer]) == 130
    assert len(calls) == interrupt_on
    assert "Traceback" not in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_a_one_role_rebuild_replaces_only_that_role(tmp_path, tasks_file, monkeypatch):
    """``--roles planner --tokenizer-from OUT/grounder`` into OUT: a new planner, the grounder and the user's file
    untouched, build.json marking the grounder kept, and no partial directory left."""
    out = tmp_path / "out"
    previous_build(out, tasks_file, monkeypatch)
    grounder = snapshot(out / "grounder")
    old_planner = (out / "planner" / "config.json").read_bytes()
    fake_trainer(monkeypatch, interrupt_on=None)
    assert main(["demo-models", "--out", str(out), "--tasks", str(tasks_file), *TINY, "--roles", "planner",
                 "--tokenizer-from", str(out / "grounder"), "--layers", "2"]) == 0
    assert snapshot(out / "grounder") == grounder and (out / "NOTES.md").read_text() == "mine\n"
    assert (out / "planner" / "config.json").read_bytes() != old_planner  # 2 layers now
    assert json.loads((out / "planner" / "config.json").read_text())["num_hidden_layers"] == 2
    build = json.loads((out / "build.json").read_text())
    assert build["grounder"]["kept"] is True and build["planner"]["config"]["layers"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tasks.jsonl"]


def test_an_interrupted_joint_build_leaves_out_as_it_was(tmp_path, tasks_file, monkeypatch, capsys):
    """``--joint-from`` builds through the partial directory too; trained into its own start directory, the agent
    is replaced only once complete."""
    agents = tmp_path / "agents"
    previous_build(agents, tasks_file, monkeypatch)
    start = agents / "grounder"
    before = snapshot(tmp_path)
    fake_trainer(monkeypatch, interrupt_on=1)
    assert interrupted_status(["demo-models", "--out", str(start), "--joint-from", str(start), "--tasks",
                               str(tasks_file), *TINY]) == 130
    assert "Traceback" not in capsys.readouterr().err
    assert snapshot(tmp_path) == before
    fake_trainer(monkeypatch, interrupt_on=None)
    assert main(["demo-models", "--out", str(start), "--joint-from", str(start), "--tasks", str(tasks_file),
                 *TINY]) == 0
    assert json.loads((start / "build.json").read_text())["start"] == str(start)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agents", "tasks.jsonl"]


def test_ctrl_c_while_loading_the_tasks_exits_130(tmp_path, monkeypatch, capsys):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.demo.world.generate_suite", interrupted)
    assert interrupted_status(["demo-models", "--out", str(tmp_path / "out"), "--tasks",
                               str(tmp_path / "none.jsonl")]) == 130
    assert "Traceback" not in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_max_positions_shorter_than_the_longest_row_is_refused_before_training(tmp_path, capsys):
    """``--max-positions 64`` trained agents on rows TRL cut at 64 tokens (the grounder's run to ~200): they never saw
    an answer's end. Refused once the tokenizer exists, naming the flag and the length needed; nothing is written."""
    out = tmp_path / "agents"
    argv = [a if a != "512" else "64" for a in TINY]
    assert exit_status(["demo-models", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert "--max-positions" in err and "max_positions 64: the longest warm-start row is" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []
