"""``[[data.sources]]``: a run's tasks from several files, each with its format and split (train on Lumos files,
evaluate on benchmark test files, as the paper does), with located errors and the workspace check on every file."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from engine.config import config_from_dict, config_to_dict, config_to_toml, load_config
from engine.errors import ConfigError, DataError
from engine.formats import load
from engine.runtime import check_eval_splits, load_run_tasks
from engine.workspace import config_paths_inside

AGENTS = {"planner": {"path": "p"}, "grounder": {"path": "g"}}


def _sources(samples: Path) -> list[dict[str, str]]:
    return [
        {"path": str(samples / "lumos_derived_maths_plan_onetime.jsonl"), "format": "lumos",
         "ground": str(samples / "lumos_derived_maths_ground_onetime.jsonl")},
        {"path": str(samples / "gsm8k_test.jsonl"), "format": "gsm8k", "split": "held_in"},
        {"path": str(samples / "svamp.jsonl"), "format": "svamp", "split": "held_out"},
    ]


def test_sources_load_each_file_with_its_format_and_split(samples_dir):
    config = config_from_dict({**AGENTS, "data": {"sources": _sources(samples_dir)},
                               "evaluate": {"splits": ["held_in", "held_out"]}})
    tasks = load_run_tasks(config)
    lumos = list(load("lumos", samples_dir / "lumos_derived_maths_plan_onetime.jsonl",
                      ground=samples_dir / "lumos_derived_maths_ground_onetime.jsonl"))
    gsm8k = list(load("gsm8k", samples_dir / "gsm8k_test.jsonl"))
    svamp = list(load("svamp", samples_dir / "svamp.jsonl"))
    assert [t.id for t in tasks] == [t.id for t in lumos + gsm8k + svamp]
    by_split = {s: sum(t.split == s for t in tasks) for s in ("train", "held_in", "held_out")}
    assert by_split == {"train": len(lumos), "held_in": len(gsm8k), "held_out": len(svamp)}
    assert all(t.gold_actions for t in tasks if t.split == "train")  # the grounder file was joined
    check_eval_splits(config, tasks)  # both evaluation splits have tasks now


def test_an_id_in_two_sources_names_both_files(samples_dir):
    path = str(samples_dir / "gsm8k_test.jsonl")
    config = config_from_dict({**AGENTS, "data": {"sources": [
        {"path": path, "format": "gsm8k", "split": "held_in"},
        {"path": path, "format": "gsm8k", "split": "held_out"}]}})
    with pytest.raises(DataError, match="duplicate id .* has it too; ids must be unique across data.sources") as info:
        load_run_tasks(config)
    assert info.value.field == "id" and path in str(info.value)


def test_two_benchmark_files_without_ids_are_told_apart_by_an_id_prefix(samples_dir, tmp_path):
    """GSM8K files carry no ids, so both numbered their records gsm8k-1, gsm8k-2, ...: a train file and a test file
    could not be used together without editing the data. The refusal now names the fix, ``id_prefix``, which puts
    text before every id of its file (and survives the config's TOML round trip)."""
    sources = [{"path": str(samples_dir / "gsm8k_train.jsonl"), "format": "gsm8k", "split": "held_in"},
               {"path": str(samples_dir / "gsm8k_test.jsonl"), "format": "gsm8k", "split": "held_out"}]
    with pytest.raises(DataError, match=r"duplicate id 'gsm8k-1': .*gsm8k_train.jsonl has it too; give one of them an "
                                        r"id_prefix \(data.sources\[2\].id_prefix = \"...\"\)"):
        load_run_tasks(config_from_dict({**AGENTS, "data": {"sources": sources}}))
    sources[1]["id_prefix"] = "test-"
    config = config_from_dict({**AGENTS, "data": {"sources": sources}})
    tasks = load_run_tasks(config)
    held_out = [t.id for t in tasks if t.split == "held_out"]
    assert held_out[:2] == ["test-gsm8k-1", "test-gsm8k-2"] and "gsm8k-1" in {t.id for t in tasks}
    path = tmp_path / "c.toml"
    path.write_text(config_to_toml(config), encoding="utf-8")
    assert load_config(path).data.sources[1].id_prefix == "test-"


@pytest.mark.parametrize(("break_it", "field"), [
    (lambda sources: sources[1].update(path="data/gsm8k_test.jsonl"), "data.sources[2].path"),
    (lambda sources: sources[0].update(ground="nowhere/ground.jsonl"), "data.sources[1].ground"),
])
def test_a_missing_data_file_names_its_config_field_and_where_relative_paths_are_read(samples_dir, break_it, field,
                                                                                       tmp_path, monkeypatch):
    # It read "data/gsm8k_test.jsonl: <file>: cannot open": right file, but not which setting, nor from where.
    monkeypatch.chdir(tmp_path)
    sources = _sources(samples_dir)
    break_it(sources)
    expected = (rf"^{re.escape(field)}: no file \S+ \(a relative path is read from the current directory, "
                rf"{tmp_path}, not from the config file's\)$")
    with pytest.raises(ConfigError, match=expected) as info:
        load_run_tasks(config_from_dict({**AGENTS, "data": {"sources": sources}}))
    assert info.value.field == field


def test_a_missing_tasks_file_given_absolutely_is_named_without_the_relative_path_note(tmp_path):
    missing = tmp_path / "tasks.jsonl"
    with pytest.raises(ConfigError, match=rf"^data.tasks: no file {missing}$"):
        load_run_tasks(config_from_dict({**AGENTS, "data": {"tasks": str(missing)}}))
    with pytest.raises(ConfigError, match=rf"^data.tasks: {tmp_path} is a directory, not a file$"):
        load_run_tasks(config_from_dict({**AGENTS, "data": {"tasks": str(tmp_path)}}))


def test_run_names_the_config_line_of_a_missing_data_file_or_model(tmp_path, capsys):
    """Errors found once the config is used (a data file or a model directory that is not there) named the field
    only, while every error found reading the config named ``FILE:LINE``: ``run`` now locates them the same way, or
    names the ``--set`` that gave the value; nothing is written either way."""
    from engine.__main__ import main

    config = tmp_path / "c.toml"
    config.write_text(f'[run]\nworkdir = "{tmp_path / "runs"}"\n\n[[data.sources]]\n'
                      f'path = "{tmp_path / "nope.jsonl"}"\nformat = "gsm8k"\n', encoding="utf-8")
    db = tmp_path / "s.duckdb"
    assert main(["run", "--config", str(config), "--db", str(db), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {config}:5: data.sources[1].path: no file ")
    args = ["run", "--config", "examples/demo.toml", "--db", str(db), "--quiet",
            "--set", f"run.workdir={tmp_path / 'runs'}"]
    assert main([*args, "--set", f"planner.path={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err  # (a long value is shown cut short)
    assert err.startswith("error: --set planner.path=") and ": planner.path: " in err and "no such model" in err
    assert not db.exists() and not (tmp_path / "runs").exists()


def test_a_number_in_a_file_for_a_path_is_refused_not_read_as_a_file_name(tmp_path):
    """``path = 5`` was read as the file "5" ("no file 5"), while ``k = "15"`` is refused: a file's values carry
    their type both ways now. On the command line every value is text (``--set critic.model=7`` is "7")."""
    config = tmp_path / "c.toml"
    config.write_text("[[data.sources]]\npath = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.toml:2: data.sources\[1\].path: expected a string, got 5 \(write it in "
                                          r'quotes: "5"\)'):
        load_config(config)
    assert load_config(None, ["critic.model=7"]).critic.model == "7"


def test_evaluation_splits_missing_from_every_source_are_refused(samples_dir):
    config = config_from_dict({**AGENTS, "data": {"sources": _sources(samples_dir)[:1]},
                               "evaluate": {"splits": ["held_in"]}})
    with pytest.raises(ConfigError, match="no 'held_in' task in .*lumos, default split") as info:
        check_eval_splits(config, load_run_tasks(config))
    assert info.value.field == "evaluate.splits"


def test_sources_round_trip_through_toml_and_set(samples_dir, tmp_path):
    config = config_from_dict({**AGENTS, "data": {"sources": _sources(samples_dir)}})
    text = config_to_toml(config)
    assert text.count("[[data.sources]]") == 3
    assert config_to_dict(config_from_dict(tomllib.loads(text))) == config_to_dict(config)
    (tmp_path / "c.toml").write_text(text)
    assert config_to_dict(load_config(tmp_path / "c.toml")) == config_to_dict(config)
    via_set = load_config(tmp_path / "c.toml", ['data.sources=[{"path": "x.jsonl", "format": "svamp"}]'])
    assert [(s.path, s.format, s.split) for s in via_set.data.sources] == [("x.jsonl", "svamp", "")]


@pytest.mark.parametrize(("source", "field", "message"), [
    ({"path": "a", "formt": "gsm8k"}, "data.sources[2].formt", "unknown field; did you mean 'format'"),
    ({"path": "a", "format": "gsm9k"}, "data.sources[2].format", "did you mean 'gsm8k'"),
    ({"format": "gsm8k"}, "data.sources[2].path", "required"),
    ({"path": "a", "format": "gsm8k", "ground": "g"}, "data.sources[2].ground", "only applies to format lumos"),
    ({"path": "a", "split": "held_in"}, "data.sources[2].split", "keeps each record's own split"),
    ({"path": "a", "format": "gsm8k", "split": "test"}, "data.sources[2].split", "is not one of"),
    ({"path": "a", "api_key": "x"}, "data.sources[2].api_key", "never write a key"),
    ("a.jsonl", "data.sources[2]", "expected a table of fields"),
])
def test_a_bad_source_names_its_item_and_field(source, field, message):
    with pytest.raises(ConfigError, match=message) as info:
        config_from_dict({**AGENTS, "data": {"sources": [{"path": "ok.jsonl", "format": "gsm8k"}, source]}})
    assert info.value.field == field


def test_every_source_file_must_be_inside_the_studio_workspace(tmp_path):
    inside = tmp_path / "ws"
    inside.mkdir()
    config = config_from_dict({**AGENTS, "run": {"workdir": str(inside / "runs")}, "data": {"sources": [
        {"path": str(inside / "a.jsonl"), "format": "gsm8k"},
        {"path": str(inside / "p.jsonl"), "format": "lumos", "ground": str(tmp_path / "outside.jsonl")}]}})
    config.planner.path = config.grounder.path = str(inside / "agent")
    with pytest.raises(ConfigError) as info:
        config_paths_inside(config, inside)
    assert info.value.field == "data.sources[2].ground"


def test_the_paper_preset_trains_on_lumos_and_evaluates_on_gsm8k_and_svamp(samples_dir):
    """examples/paper.toml names its files; with the carried samples in their place it loads train, held-in and
    held-out tasks, and without them it is refused naming the first missing file."""
    config = load_config(Path(__file__).resolve().parents[1] / "examples" / "paper.toml")
    assert [(s.format, s.split) for s in config.data.sources] == [
        ("lumos", "train"), ("gsm8k", "held_in"), ("svamp", "held_out")]
    with pytest.raises(ConfigError) as info:
        load_run_tasks(config)
    assert info.value.field == "data.sources[1].path" and "data/lumos_maths_plan_onetime.jsonl" in str(info.value)
    samples = {"lumos_maths_plan_onetime.jsonl": "lumos_derived_maths_plan_onetime.jsonl",
               "lumos_maths_ground_onetime.jsonl": "lumos_derived_maths_ground_onetime.jsonl",
               "gsm8k_test.jsonl": "gsm8k_test.jsonl", "SVAMP.json": "svamp.jsonl"}
    for source in config.data.sources:
        source.path = str(samples_dir / samples[Path(source.path).name])
        source.ground = str(samples_dir / samples[Path(source.ground).name]) if source.ground else ""
    tasks = load_run_tasks(config)
    assert {t.split for t in tasks} == {"train", "held_in", "held_out"}
    check_eval_splits(config, tasks)
