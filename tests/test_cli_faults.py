"""CLI faults found by a review, each fixed to a clear error (exit 2 for bad input, located where it can be) with no
traceback and nothing half-written:

* ``execute`` exited 0 when its JSON said ``"ok": false``; it now exits 1 (the JSON is still printed), 2 for a bad
  ``--context`` file.
* ``step`` on a stage whose model directory has gone (the configured ``grounder.path``, or the checkpoint an earlier
  iteration recorded in the store, or the model a LoRA checkpoint applies to) raised a traceback and recorded the
  stage failed; it is now refused up front, naming the directory and where it came from, and nothing is recorded.
  The check is in ``engine.loop.run_stage``, so resumed runs, experiments and the studio's jobs refuse the same way.
* A JSONL task file whose last line is truncated reported "column 1" (json counts columns from the newline that ends
  the line); the error now names that line and the column where the line ends, and says the record is cut short.
* A bad ``--set`` value was reported as coming from the config file; it now names ``--set section.field=value``,
  while a bad value in a TOML file names the file and the field's line.
* ``eval --formulation`` had no help text; ``report --split`` without ``--by-template`` was silently ignored and now
  exits 2.
"""

from __future__ import annotations

import json
import shutil

import pytest

from engine.__main__ import build_parser, main
from engine.config import load_config
from engine.errors import ConfigError, DataError
from engine.store import Store
from engine.tasks import load_tasks, read_records

GOOD_TASK = json.dumps({"id": "a", "domain": "maths", "split": "train", "question": "What is 2+2?"})


# -- execute: exit 1 when the result is not ok --------------------------------------------------------------------

@pytest.mark.parametrize("actions", ["R1 = Calculator(R9)", "this is not an action"])
def test_execute_exits_1_when_the_actions_fail_and_still_prints_the_json(actions, capsys):
    assert main(["execute", "--domain", "maths", "--actions", actions]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["error"]


def test_execute_exits_0_when_ok_and_2_for_a_missing_context_file(tmp_path, capsys):
    assert main(["execute", "--domain", "maths", "--actions", "R1 = Calculator(3*4)"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    missing = tmp_path / "none.jsonl"
    assert main(["execute", "--domain", "qa", "--actions", "R1 = KnowledgeQuery(x)", "--context", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and str(missing) in captured.err


def test_execute_help_states_the_exit_codes():
    text = " ".join(_subcommand("execute").format_help().split())
    assert "1 when it is false" in text and "2 when --context is missing or bad" in text


# -- step: a model directory that has gone is refused up front ----------------------------------------------------

@pytest.fixture
def moved_grounder_run(tmp_path, tiny_run, tiny_agents_dir):
    """A created run whose configured grounder is a copy that the test can take away: ``(db, run_id, grounder)``."""
    grounder = tmp_path / "grounder-copy"
    shutil.copytree(tiny_agents_dir / "grounder", grounder)
    return (*tiny_run(f"grounder.path={grounder}"), grounder)


def _step(db, run_id: str, stage: str, iteration: int) -> int:
    return main(["step", stage, "--run", run_id, "--iteration", str(iteration), "--db", str(db), "--quiet"])


def _stage_states(db, run_id: str, iteration: int) -> dict:
    with Store(db) as store:
        return store.stage_status(run_id, iteration)


def test_step_with_the_configured_grounder_gone_is_refused_naming_the_field(moved_grounder_run, capsys):
    db, run_id, grounder = moved_grounder_run
    with Store(db) as store:
        store.set_stage(run_id, 1, "sample", "done")  # score of iteration 1 may run: it reads the plans
    shutil.rmtree(grounder)
    assert _step(db, run_id, "score", 1) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: grounder.path: ") and str(grounder) in err and "Traceback" not in err
    assert "score" not in _stage_states(db, run_id, 1)  # not recorded as failed (nor at all)


def test_step_with_a_recorded_checkpoint_gone_names_the_iteration_it_came_from(moved_grounder_run, tmp_path, capsys):
    db, run_id, _ = moved_grounder_run
    gone = tmp_path / "runs" / "moved-away" / "grounder"
    with Store(db) as store:
        for stage in ("sample", "score", "pairs", "train_planner", "ground", "critique", "train_grounder"):
            store.set_stage(run_id, 1, stage, "done")
        store.put_checkpoint(run_id, 1, "grounder", gone, "full")
        store.set_stage(run_id, 2, "sample", "done")
    assert _step(db, run_id, "score", 2) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: iteration 1 grounder checkpoint: ") and str(gone) in err
    assert f"python -m engine step train_grounder --run {run_id} --iteration 1" in err
    assert "score" not in _stage_states(db, run_id, 2)
    # a LoRA checkpoint that is there, but the model it applies to is not
    adapter = tmp_path / "runs" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "moat_base.json").write_text(json.dumps({"base": str(gone), "base_adapter": ""}))
    with Store(db) as store:
        store.put_checkpoint(run_id, 1, "grounder", adapter, "lora-adapter")
    assert _step(db, run_id, "score", 2) == 2
    err = capsys.readouterr().err
    assert f"the adapter checkpoint {adapter} applies to {gone}" in err
    assert "score" not in _stage_states(db, run_id, 2)


def test_a_resumed_run_with_a_recorded_checkpoint_gone_is_refused_before_the_stage(moved_grounder_run, tmp_path,
                                                                                      capsys):
    """``run --run ID`` checks each stage's model directories as it reaches it (engine.loop.run_loop): exit 2 naming
    the checkpoint, the stage not recorded as failed, so restoring the directory and resuming just works."""
    from engine.loop import pending, run_config

    db, run_id, _ = moved_grounder_run
    gone = tmp_path / "runs" / "moved-away" / "grounder"
    with Store(db) as store:
        for iteration, stage in pending(store, run_id, run_config(store, run_id), 2):
            if iteration < 2 or stage == "sample":
                store.set_stage(run_id, iteration, stage, "done")
        store.put_checkpoint(run_id, 1, "grounder", gone, "full")
    assert main(["run", "--db", str(db), "--run", run_id, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: iteration 1 grounder checkpoint: ") and str(gone) in err and "Traceback" not in err
    assert "score" not in _stage_states(db, run_id, 2)


def test_run_stage_itself_refuses_a_gone_model_so_every_caller_is_covered(moved_grounder_run):
    """The check lives in ``engine.loop.run_stage`` (not in each command): a direct call, as the benchmarks and the
    studio's jobs make, raises the same ``CheckpointError`` and records nothing."""
    from engine.errors import CheckpointError
    from engine.loop import run_stage

    db, run_id, grounder = moved_grounder_run
    shutil.rmtree(grounder)
    with Store(db) as store:
        store.set_stage(run_id, 1, "sample", "done")
        with pytest.raises(CheckpointError, match=r"^grounder.path: .*no such model directory"):
            run_stage(store, run_id, 1, "score")
        assert "score" not in store.stage_status(run_id, 1)


def test_a_studio_job_on_a_gone_model_ends_with_the_message_alone(moved_grounder_run):
    """A studio job (``studio.jobs.JobWorker``) that meets a deleted model directory ends "failed" with the message
    naming the field and the directory, no traceback, and the stage is not recorded (restore it and start again)."""
    from studio.jobs import JobWorker

    db, run_id, grounder = moved_grounder_run
    shutil.rmtree(grounder)
    with Store(db) as store:
        store.set_stage(run_id, 1, "sample", "done")
        jobs = JobWorker(store)
        assert jobs.start_loop("next_stage", run_id) is None
        assert jobs.wait(120)
        snap = jobs.snapshot()
        assert snap["status"] == "failed"
        assert snap["error"].startswith("grounder.path: ") and str(grounder) in snap["error"]
        assert "Traceback" not in snap["error"]
        states = [state["status"] for t in (0, 1) for state in store.stage_status(run_id, t).values()]
        assert states and set(states) == {"done"}  # only the stage marked done above: none running or failed


# -- a truncated last line of a JSONL file: the right line and column ---------------------------------------------

@pytest.mark.parametrize("newline", ["", "\n", "\r\n"])
@pytest.mark.parametrize(("last", "column"), [
    ('{"id": "b", "question": "a', 27),  # cut inside a string (the string starts at column 25)
    ('{"id": "b", "question": "a"', 28),  # cut after a value (json said: line 2 column 1 when a newline followed)
    ('{"id": "b",', 12),
])
def test_a_truncated_last_line_names_its_line_and_where_it_ends(tmp_path, newline, last, column):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(f"{GOOD_TASK}\n{last}{newline}".encode())
    with pytest.raises(DataError) as info:
        list(load_tasks(path))
    assert (info.value.line, info.value.field) == (2, "<json>")
    assert info.value.message.startswith(f"invalid JSON at column {column}: ") and "cut short" in info.value.message


def test_a_bad_line_in_the_middle_keeps_its_own_column(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(f'{GOOD_TASK}\n{{"id": "b",, "x": 1}}\n{GOOD_TASK}\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        list(load_tasks(path))
    assert info.value.line == 2 and info.value.message.startswith("invalid JSON at column 12: Expecting property")


def test_the_load_command_names_the_truncated_line(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    path.write_text(f'{GOOD_TASK}\n{{"id": "b", "question": "a"\n', encoding="utf-8")
    assert main(["load", "--format", "tasks", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: <json>: invalid JSON at column 28" in err and "column 1" not in err


def test_a_truncated_json_array_names_its_last_line_not_the_one_after(tmp_path):
    path = tmp_path / "svamp.json"
    path.write_text('[\n  {"ID": "a", "Body": "b"},\n  {"ID": "b", "Body": "c"\n\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        list(read_records(path))
    assert info.value.line == 3 and "at column 26: the file ends before record 2 does" in info.value.message


# -- --set errors name the command line; TOML errors name the file and line -----------------------------------------

def test_a_bad_set_value_names_the_override_not_the_file():
    with pytest.raises(ConfigError) as info:
        load_config("examples/demo.toml", ["sample.k=1"])
    assert str(info.value).startswith("--set sample.k=1: sample.k: must be >= 2")
    assert "demo.toml" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^--set smaple\.k=3: smaple: unknown section"):
        load_config("examples/demo.toml", ["smaple.k=3"])
    with pytest.raises(ConfigError, match=r"^--set data\.sources=.*: data\.sources\[1\]\.format: 'x' is not one"):
        load_config("examples/demo.toml", ['data.sources=[{"path": "a.jsonl", "format": "x"}]'])


@pytest.mark.parametrize("url", ["https://user:hunter22@example.com/v1", "https://example.com/v1?api_key=hunter22",
                                 "https://example.com/v1?api-version=1&key=hunter22", "http://h/v1?TOKEN=hunter22",
                                 "https://x.blob.core.windows.net/v1?sv=2020&sig=hunter22"])
def test_a_key_shaped_set_value_is_not_echoed_in_the_source(url):
    """A password in the URL, or a key in its query (``?api_key=`` was accepted: stored with the run, shown in the
    studio and in every critic error), is refused without echoing it."""
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"critic.base_url={url}"])
    assert str(info.value).startswith("--set critic.base_url=<hidden>: ") and "hunter22" not in str(info.value)


@pytest.mark.parametrize("url", ["https://example.openai.azure.com/openai/v1?api-version=2024-10-21",
                                 "http://localhost:8000/v1", "http://h/v1?monkey=1"])
def test_a_url_without_a_secret_is_kept(url):
    assert load_config(None, [f"critic.base_url={url}"]).critic.base_url == url


def test_the_eval_command_reports_a_bad_set_value_as_the_command_line(capsys):
    assert main(["eval", "--config", "examples/demo.toml", "--set", "sample.k=1"]) == 2
    assert capsys.readouterr().err.startswith("error: --set sample.k=1: sample.k: must be >= 2")


def test_a_bad_value_in_a_toml_file_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[run]\nname = "x"\n\n[tools]\ncorpus = """\n[sample]\nk = 9\n"""\n\n[sample]\n# few\n  k = 1\n'
                    '\n[[data.sources]]\npath = "a.jsonl"\n\n[[data.sources]]\npath = "b.jsonl"\nformat = "nope"\n',
                    encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:19: data.sources[2].format: 'nope' is not one of")
    with pytest.raises(ConfigError) as info:  # the sources fixed on the command line: the file's sample.k is next
        load_config(path, ["data.sources=[]"])
    assert str(info.value).startswith(f"{path}:12: sample.k: must be >= 2")  # not line 7, inside the string
    path.write_text("sample.k = 1\n", encoding="utf-8")  # a dotted key before any table
    with pytest.raises(ConfigError, match=r"c\.toml:1: sample\.k: must be >= 2"):
        load_config(path)
    path.write_text("sample = { k = 1 }\n", encoding="utf-8")  # an inline table: no line rather than a wrong one
    with pytest.raises(ConfigError, match=r"c\.toml: sample\.k: must be >= 2"):
        load_config(path)


# -- eval --formulation has help; report --split needs --by-template ----------------------------------------------

def _subcommand(name: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


def test_eval_formulation_has_help_naming_the_choices_and_the_default():
    text = " ".join(_subcommand("eval").format_help().split())
    assert "onetime = the planner writes the whole plan" in text and "iterative = subgoal by subgoal" in text
    assert "default: the config's evaluate.formulation" in text


# -- the command line starts without the training stack -----------------------------------------------------------

def test_building_the_command_line_imports_neither_torch_nor_transformers():
    """``engine.__main__``'s promise: command modules import torch/transformers inside ``run``, so ``--help``, a usage
    error and the light commands start at once (``step``'s stage list once imported every stage: 6 s per command)."""
    import subprocess
    import sys

    probe = ("import sys; from engine.__main__ import build_parser; build_parser(); "
             "print(sorted(m for m in ('torch', 'transformers', 'trl', 'gradio') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
