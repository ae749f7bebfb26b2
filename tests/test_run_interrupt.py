"""``python -m engine run`` / ``experiment`` stopped by Ctrl-C, and the iterations a run is asked for.

* A run or an experiment stopped by a real SIGINT (sent to this process by a progress hook, handled by the command's
  own handler) exits 130, not 0, still prints its JSON summary with status "stopped", and stays resumable.
* ``run --iterations N`` records N as the run's ``run.iterations`` (the store's config snapshot and the run
  directory's config.toml), so ``run --run ID`` resumes to N, not to the config file's count; ``run --run ID
  --iterations M`` re-targets an existing run; ``--iterations 0`` and the studio's per-call targets record nothing.

Tiny agents and the small demo world (``tests/conftest.py``), in this process.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import tomllib
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.loop import create_run, run_config, run_directory, run_loop, write_run_config
from engine.store import Store

pytestmark = pytest.mark.slow  # runs stages of tiny models: `pytest -m "not slow"` leaves these out


@pytest.fixture(autouse=True)
def keep_sigint():
    """The commands install their own Ctrl-C handler: put pytest's back afterwards."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def ctrl_c_at_first_event(monkeypatch) -> list[dict]:
    """Make ``engine run`` send this process a SIGINT at its first progress event (iteration 0's evaluate
    announcing itself): the command's handler sets its stop flag and the stage stops at its first check."""
    from engine.commands import run as run_command

    events: list[dict] = []

    def sink(event: dict) -> None:
        events.append(event)
        if len(events) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(run_command, "progress_printer", lambda quiet: sink)
    return events


def config_file(directory: Path, config, iterations: int) -> Path:
    config = copy.deepcopy(config)
    config.run.iterations = iterations
    return write_run_config(directory, config)


def summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def toml_iterations(store: Store, run_id: str) -> int:
    return tomllib.loads((run_directory(store, run_id) / "config.toml").read_text())["run"]["iterations"]


def test_a_run_stopped_by_ctrl_c_exits_130_with_its_summary_and_resumes(tmp_path, loop_config, monkeypatch,
                                                                        capsys):
    db = tmp_path / "s.duckdb"
    cfg = config_file(tmp_path / "cfg", loop_config, 1)
    events = ctrl_c_at_first_event(monkeypatch)
    assert main(["run", "--db", str(db), "--config", str(cfg)]) == 130
    assert (events[0]["iteration"], events[0]["stage"]) == (0, "evaluate")
    out = summary(capsys.readouterr().out)
    assert out["status"] == "stopped"
    # "iterations" is the run's iterations (it held the whole run object, with its own "iterations" inside)
    assert [it["iteration"] for it in out["iterations"]] == [0] and out["directory"].endswith(out["run_id"])
    with Store(db) as store:
        assert store.stage_status(out["run_id"], 0)["evaluate"]["status"] == "stopped"
    monkeypatch.undo()  # no more Ctrl-C: the same run resumes (iteration 0 only: --iterations 0 records nothing)
    assert main(["run", "--db", str(db), "--run", out["run_id"], "--iterations", "0", "--quiet"]) == 0
    assert summary(capsys.readouterr().out)["status"] == "done"
    with Store(db) as store:
        assert store.stage_status(out["run_id"], 0)["evaluate"]["status"] == "done"
        assert run_config(store, out["run_id"]).run.iterations == 1


def test_a_new_run_records_its_iterations_and_resumes_to_them(tmp_path, loop_config, monkeypatch, capsys):
    """The config file says 2, the command 1: the stopped run resumes to iteration 1 and no further."""
    db = tmp_path / "s.duckdb"
    cfg = config_file(tmp_path / "cfg", loop_config, 2)
    ctrl_c_at_first_event(monkeypatch)
    assert main(["run", "--db", str(db), "--config", str(cfg), "--iterations", "1"]) == 130
    run_id = summary(capsys.readouterr().out)["run_id"]
    with Store(db) as store:
        assert run_config(store, run_id).run.iterations == 1
        assert toml_iterations(store, run_id) == 1  # the run directory describes the same run
    monkeypatch.undo()
    assert main(["run", "--db", str(db), "--run", run_id, "--quiet"]) == 0
    assert summary(capsys.readouterr().out)["status"] == "done"
    with Store(db) as store:
        assert store.iterations(run_id) == [0, 1]
        assert store.stage_status(run_id, 1)["evaluate"]["status"] == "done"


def test_iterations_given_to_an_existing_run_re_target_it_and_per_call_targets_do_not(tmp_path, loop_config,
                                                                                      monkeypatch, capsys):
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        run_id = create_run(store, loop_config)  # run.iterations = 1
    ctrl_c_at_first_event(monkeypatch)
    assert main(["run", "--db", str(db), "--run", run_id, "--iterations", "3"]) == 130  # extends
    with Store(db) as store:
        assert run_config(store, run_id).run.iterations == 3 and toml_iterations(store, run_id) == 3
        snapshot = store.get_run(run_id)["config"]
    ctrl_c_at_first_event(monkeypatch)
    assert main(["run", "--db", str(db), "--run", run_id, "--iterations", "2"]) == 130  # limits
    with Store(db) as store:
        assert run_config(store, run_id).run.iterations == 2 and toml_iterations(store, run_id) == 2
        assert store.get_run(run_id)["config"] == {**snapshot, "run": {**snapshot["run"], "iterations": 2}}
        # the studio's jobs and an experiment's runs pass a target per call: the run's own stays
        assert run_loop(store, run_id, iterations=0, should_stop=lambda: True) == "stopped"
        assert run_config(store, run_id).run.iterations == 2
    capsys.readouterr()


def test_an_experiment_stopped_by_ctrl_c_exits_130_and_the_same_command_resumes_its_run(
        tmp_path, tiny_agents_dir, demo_tasks, monkeypatch, capsys):
    import engine.runner
    from engine.experiment import load_experiment
    from engine.runner import plan_runs
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    write_tasks(demo_tasks, tmp_path / "tasks.jsonl")
    shared = [o for o in tiny_overrides(tmp_path, tiny_agents_dir, tmp_path / "tasks.jsonl") if "run." not in o]
    exp_file = tmp_path / "tiny.toml"
    exp_file.write_text(f'[experiment]\nname = "tiny"\nbase = {json.dumps(str(Path("examples/demo.toml").resolve()))}'
                        f'\nseeds = [1, 2]\niterations = 1\nset = {json.dumps([*shared, f"run.workdir={tmp_path}"])}'
                        '\n[variants.full]\nset = []\n')
    real_run_loop = engine.runner.run_loop

    def ctrl_c_after_first_stage(store, run_id, **kwargs):  # a real SIGINT once iteration 0's evaluate is done
        def on_stage(*args):
            kwargs["on_stage"](*args)
            os.kill(os.getpid(), signal.SIGINT)
        return real_run_loop(store, run_id, **{**kwargs, "on_stage": on_stage})

    monkeypatch.setattr(engine.runner, "run_loop", ctrl_c_after_first_stage)
    db = tmp_path / "s.duckdb"
    assert main(["experiment", "--config", str(exp_file), "--db", str(db), "--quiet"]) == 130
    out = summary(capsys.readouterr().out)
    assert out["status"] == "stopped"
    assert [r["status"] for r in out["runs"]] == ["stopped", "not started"]
    run_id = out["runs"][0]["run_id"]
    with Store(db) as store:
        assert store.stage_status(run_id, 0)["evaluate"]["status"] == "done"
        exp = load_experiment(exp_file)
        plans = plan_runs(store, exp, ["full"], [1, 2], 1)  # what the same command does next
    assert plans[0].run_id == run_id and plans[0].units > 0  # resumes this run, not a new one
    assert plans[1].run_id is None  # the second seed's run is created then


def test_a_step_stopped_by_ctrl_c_exits_130_with_its_json_line_and_runs_again(tmp_path, loop_config, monkeypatch,
                                                                              capsys):
    """`step` had no Ctrl-C handler: a SIGINT ended it in a KeyboardInterrupt traceback with the stage left
    "running". Like `run`, it now lets the batch in flight finish, records "stopped" and exits 130."""
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        run_id = create_run(store, loop_config)
    events = ctrl_c_at_first_event(monkeypatch)
    args = ["step", "evaluate", "--db", str(db), "--run", run_id, "--iteration", "0"]
    assert main(args) == 130
    assert (events[0]["iteration"], events[0]["stage"]) == (0, "evaluate")
    assert summary(capsys.readouterr().out)["status"] == "stopped"
    with Store(db) as store:
        assert store.stage_status(run_id, 0)["evaluate"]["status"] == "stopped"
    monkeypatch.undo()
    assert main([*args, "--quiet"]) == 0
    assert summary(capsys.readouterr().out)["state"]["status"] == "done"


def test_a_second_ctrl_c_quits_at_once_records_stopped_and_the_run_resumes(tmp_path, loop_config, monkeypatch,
                                                                           capsys):
    """The first Ctrl-C only asks for a stop after the batch in flight, and an evaluation runs to its end first: a
    user saw nothing happen for a minute. The first press now says so and how to quit; a second quits at once, with
    one line (no traceback), exit 130, and the stage recorded "stopped" (not left "running"), resumable."""
    from engine.commands import run as run_command

    def sink(event: dict) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # heard: the stop flag is set, the note printed
        os.kill(os.getpid(), signal.SIGINT)  # again, before the stage reached its next check: quit now

    monkeypatch.setattr(run_command, "progress_printer", lambda quiet: sink)
    db = tmp_path / "s.duckdb"
    assert main(["run", "--db", str(db), "--config", str(config_file(tmp_path / "cfg", loop_config, 1))]) == 130
    captured = capsys.readouterr()
    assert "stopping after the batch in flight" in captured.err and "Press Ctrl-C again" in captured.err
    assert captured.err.rstrip().endswith("run: stopped by Ctrl-C") and "Traceback" not in captured.err
    assert captured.out == ""  # quit at once: no summary
    with Store(db) as store:
        (run_id,) = [run["run_id"] for run in store.list_runs()]
        state = store.stage_status(run_id, 0)["evaluate"]
        assert state["status"] == "stopped" and "second Ctrl-C" in state["error"]
    # no summary line: the run is named on stderr with the command that resumes it
    assert f"run {run_id} quit at once; `python -m engine run --run {run_id} --db {db}` resumes it" in captured.err
    monkeypatch.undo()
    assert main(["run", "--db", str(db), "--run", run_id, "--iterations", "0", "--quiet"]) == 0
    assert summary(capsys.readouterr().out)["status"] == "done"


def test_ctrl_c_in_a_command_without_its_own_handler_is_one_line_and_130(monkeypatch, capsys, tmp_path):
    """``swap`` and ``eval`` evaluate for minutes with no stop flag of their own: Ctrl-C there printed a
    KeyboardInterrupt traceback of a hundred lines. ``engine.__main__`` ends any command so, with one line."""
    from engine.commands import swap as swap_command

    def evaluating(args) -> int:
        raise KeyboardInterrupt  # where a Ctrl-C lands inside a long evaluation

    monkeypatch.setattr(swap_command, "run", evaluating)
    assert main(["swap", "--run", "r", "--db", str(tmp_path / "s.duckdb")]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "swap: stopped by Ctrl-C"


def test_a_stop_during_the_evaluation_stops_it_within_a_batch(tmp_path, loop_config, monkeypatch, capsys):
    """The evaluate stage runs one evaluation over every task and recorded nothing until it returned, so a Ctrl-C
    (or the studio's Stop) pressed once it had begun waited for all of it. It now stops at the next generation or
    scoring batch (``engine.stop_check``): the stage is "stopped", no metrics are written, and a resume evaluates."""
    from engine import generation
    from engine.commands import run as run_command

    batches: list[int] = []
    real = generation.new_tokens

    def counted(*args, **kwargs):
        batches.append(1)
        return real(*args, **kwargs)

    def sink(event: dict) -> None:
        if event.get("message") == "planning and grounding":  # the evaluation has begun: its first check is past
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(generation, "new_tokens", counted)
    monkeypatch.setattr(run_command, "progress_printer", lambda quiet: sink)
    db = tmp_path / "s.duckdb"
    config = copy.deepcopy(loop_config)
    config.evaluate.batch_size = 2  # several batches, so "within one" is seen
    assert main(["run", "--db", str(db), "--config", str(config_file(tmp_path / "cfg", config, 1))]) == 130
    out = summary(capsys.readouterr().out)
    assert batches == []  # stopped before its first generation batch
    with Store(db) as store:
        assert store.stage_status(out["run_id"], 0)["evaluate"]["status"] == "stopped"
        assert store.count("metrics", out["run_id"]) == 0
    monkeypatch.undo()
    assert main(["run", "--db", str(db), "--run", out["run_id"], "--iterations", "0", "--quiet"]) == 0
    with Store(db) as store:
        assert store.stage_status(out["run_id"], 0)["evaluate"]["status"] == "done"
        assert store.count("metrics", out["run_id"]) > 0
