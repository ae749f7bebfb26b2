"""Config loading: presets validate, TOML/YAML, --set overrides, errors that name the field and file."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from engine.config import RunConfig, config_from_dict, config_to_dict, field_help, load_config, parse_overrides
from engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", ["demo.toml", "paper.toml"])
def test_presets_validate(preset):
    config = load_config(ROOT / "examples" / preset)
    assert config.sample.k == 15 and config.dpo.beta == 0.2 and config.pairs.min_gap == 0.1


def test_set_overrides_and_round_trip():
    config = load_config(ROOT / "examples" / "demo.toml", ["sample.k=8", "data.domains=maths,qa", "dpo.lora=true"])
    assert (config.sample.k, config.data.domains, config.dpo.lora) == (8, ["maths", "qa"], True)
    assert config_from_dict(config_to_dict(config)) == config


def test_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  k: 4\npairs:\n  rule: top_bottom_k\n")
    config = load_config(path)
    assert config.sample.k == 4 and config.pairs.rule == "top_bottom_k"


@pytest.mark.parametrize(("override", "message"), [
    ("sample.k=1", "sample.k: must be >= 2"),
    ("sample.kk=3", "sample.kk: unknown field"),
    ("nope.k=3", "nope: unknown section"),
    ("dpo.beta=abc", "dpo.beta: expected a number"),
    ("critic.backend=foo", "critic.backend: 'foo' is not one of"),
    ("sample.top_p=1.5", "sample.top_p: must be in (0, 1]"),
    ("critic.backend=openai", "critic.model: required"),
    ("run.iterations=2.5", "run.iterations: expected an integer"),
])
def test_errors_name_the_field(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sample]\nk = 'x'\n")
    with pytest.raises(ConfigError, match=r"bad.toml:2: sample.k: expected an integer"):
        load_config(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("[sample\n")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(broken)
    with pytest.raises(ConfigError, match="malformed"):
        parse_overrides(["malformed"])


@pytest.mark.parametrize(("line", "message"), [
    ('[sample]\nk = "15"\n', 'c.toml:2: sample.k: expected an integer, got the string "15"'),
    ('[dpo]\nbeta = "0.2"\n', 'c.toml:2: dpo.beta: expected a number, got the string "0.2"'),
    ('[dpo]\nlora = "true"\n', 'c.toml:2: dpo.lora: expected true or false, got the string "true"'),
    ('[[schedule.phases]]\nname = "a"\niterations = "2"\n',
     'c.toml:3: schedule.phases[1].iterations: expected an integer, got the string "2"'),
])
def test_file_refuses_a_quoted_number_or_bool(tmp_path, line, message):
    """A file's value carries its type: a quoted number was silently converted (or kept as a string); --set text is
    still parsed, and overrides the file's bad value."""
    path = tmp_path / "c.toml"
    path.write_text(line)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{tmp_path / message}"
    dotted, value = message.split(": ")[1], message.rsplit(" ", 1)[1].strip('"')
    if "[" not in dotted:  # the same text on the command line is parsed, and replaces the file's value
        section, name = dotted.split(".")
        assert str(getattr(getattr(load_config(path, [f"{dotted}={value}"]), section), name)).lower() == value


def test_yaml_refuses_a_quoted_number(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('sample:\n  k: "15"\n')
    with pytest.raises(ConfigError, match=r'c.yaml:2: sample.k: expected an integer, got the string "15"'):
        load_config(path)


def test_yaml_reads_an_exponent_without_a_dot_as_a_number(tmp_path):
    # YAML 1.1 (PyYAML's default) would read 1e-6 as the string "1e-6", which a number field refuses.
    path = tmp_path / "c.yaml"
    path.write_text("dpo:\n  learning_rate: 1e-6\nsample:\n  k: 15\n  temperature: 7E-1\nrun:\n  name: 08\n")
    config = load_config(path)
    assert config.dpo.learning_rate == 1e-6 and config.sample.temperature == 0.7
    assert config.sample.k == 15 and isinstance(config.sample.k, int)
    assert config.run.name == "08"  # YAML 1.1 reads 08 (no octal digit) as a string: kept so


def test_every_field_has_help():
    assert all(text for text in field_help().values())


# --- every numeric field has a declared range, and each bound is enforced -------------------------------------------


def numeric_fields() -> list[tuple[str, type, dict]]:
    """``(section.field, int|float, metadata)`` for every numeric field of every section."""
    out = []
    for section in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(section.default_factory()):
            hint = typing.get_type_hints(type(section.default_factory()))[f.name]
            if hint in (int, float):
                out.append((f"{section.name}.{f.name}", hint, dict(f.metadata)))
    return out


def outside(hint: type, meta: dict) -> list:
    """Values just outside each declared bound."""
    step = 1 if hint is int else 0.5
    values = []
    if meta["ge"] is not None:
        values.append(meta["ge"] - step)
    if meta["gt"] is not None:
        values.append(meta["gt"])
    if meta["le"] is not None:
        values.append(meta["le"] + step)
    if meta["lt"] is not None:
        values.append(meta["lt"])
    return [int(v) if hint is int else v for v in values]


def test_every_numeric_field_declares_a_range():
    fields_ = numeric_fields()
    assert len(fields_) > 40
    missing = [name for name, _, meta in fields_ if meta["ge"] is None and meta["gt"] is None]
    assert missing == []


@pytest.mark.parametrize(("dotted", "hint", "meta"), numeric_fields(), ids=[f[0] for f in numeric_fields()])
def test_each_numeric_bound_is_enforced(dotted, hint, meta):
    load_config(None, [])  # the defaults are inside every range
    for value in outside(hint, meta):
        with pytest.raises(ConfigError) as info:
            load_config(None, [f"{dotted}={value}"])
        assert info.value.field == dotted and "must be" in info.value.message, str(info.value)
    for bad in ["abc", "true", "[1]"] + (["nan", "inf", "-inf"] if hint is float else ["1.5"]):
        with pytest.raises(ConfigError) as info:
            load_config(None, [f"{dotted}={bad}"])
        assert info.value.field == dotted and "expected" in info.value.message, (bad, str(info.value))


@pytest.mark.parametrize(("override", "message"), [
    ("sample.k=0", "sample.k: must be >= 2 (a pair needs two plans), got 0"),
    ("dpo.learning_rate=-1e-5", "dpo.learning_rate: must be in (0, 1]"),
    ("sft.batch_size=0", "sft.batch_size: must be >= 1"),
    ("pairs.min_gap=-0.1", "pairs.min_gap: must be >= 0"),
    ("sample.temperature=-0.5", "sample.temperature: must be >= 0"),
    ("ground.top_p=0", "ground.top_p: must be in (0, 1]"),
    ("critic.top_p=1.01", "critic.top_p: must be in (0, 1]"),
    ("run.iterations=-1", "run.iterations: must be >= 1"),
    ("dpo.lora_dropout=1", "dpo.lora_dropout: must be in [0, 1)"),
    ("run.seed=-3", "run.seed: must be in [0, 4294967295]"),
    ("pairs.rule=best_wrost", "pairs.rule: 'best_wrost' is not one of best_worst, all_above_gap, top_bottom_k "
                              "(did you mean 'best_worst'?)"),
    ("data.domains=maths,math", "data.domains: 'math' is not one of maths, qa, web (did you mean 'maths'?)"),
    ('data.sources=[{"path": "x.jsonl", "split": "test"}]',
     "data.sources[1].split: 'test' is not one of '', train, dev, held_in, held_out"),  # '' named, not blank
    ("evaluate.splits=[\"held_in\", 3]", "evaluate.splits: expected a list of strings"),
    ("data.domains=[maths", "data.domains: expected a JSON list"),
    ("sample.temprature=0.5", "sample.temprature: unknown field; did you mean 'temperature'?"),
    ("sampel.k=3", "sampel: unknown section; did you mean 'sample'?"),
    # A key-shaped typo of a real field is a typo, not a secret (it read "never write a key in a config").
    ("sample.max_new_token=64", "sample.max_new_token: unknown field; did you mean 'max_new_tokens'?"),
    ("critic.max_token=64", "critic.max_token: unknown field; did you mean 'max_tokens'?"),
    ("critic.hf_token=abc", "critic.hf_token: never write a key in a config"),  # a secret, not a slip
])
def test_impossible_values_and_typos(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)


def test_file_typos_types_encodings(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[sample]\ntop_k = 3\n")
    with pytest.raises(ConfigError, match=r"c.toml:2: sample.top_k: unknown field; did you mean 'top_p'\?"):
        load_config(toml)
    toml.write_text("[pairs]\nmin_gap = nan\n")
    with pytest.raises(ConfigError, match=r"c.toml:2: pairs.min_gap: expected a finite number"):
        load_config(toml)
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("sample:\n  k: [3]\ndata:\n  domains: [{a: 1}]\n")
    with pytest.raises(ConfigError, match=r"c.yaml:2: sample.k: expected an integer"):
        load_config(yaml_file)
    yaml_file.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"c.yaml: <root>"):
        load_config(yaml_file)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"[run]\nname = 'caf\xe9'\n")
    with pytest.raises(ConfigError, match=r"latin.toml: <file>: not valid UTF-8"):
        load_config(latin)
    with pytest.raises(ConfigError, match=r"<file>: cannot read"):
        load_config(tmp_path)  # a directory
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf[sample]\nk = 4\n")
    assert load_config(bom).sample.k == 4


def test_domain_filter_that_keeps_nothing_is_an_error(tmp_path):
    from engine.runtime import load_run_tasks

    config = load_config(ROOT / "examples" / "demo.toml", ["data.domains=web"])
    with pytest.raises(ConfigError, match="data.domains: no task of web"):
        load_run_tasks(config)


def test_create_run_writes_its_config_beside_the_checkpoints(tmp_path, loop_config):
    """A run directory describes itself without the store: config.toml reads back to the stored config."""
    from engine.config import config_to_dict, load_config
    from engine.loop import create_run, run_config, run_directory
    from engine.store import Store

    loop_config.dpo.sft_weight = 0.5  # a non-default value of each kind travels
    loop_config.evaluate.splits = ["held_in"]
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        written = run_directory(store, run_id) / "config.toml"
        assert written.is_file() and not list(written.parent.glob("*.partial"))
        assert config_to_dict(load_config(written)) == config_to_dict(run_config(store, run_id))
    assert load_config(written).dpo.sft_weight == 0.5 and load_config(written).evaluate.splits == ["held_in"]


def test_set_json_tables_carry_json_types_and_refuse_a_quoted_number():
    """--set's JSON text is parsed once; inside it a quoted number is a string, refused as in a file (it was
    silently converted), naming the item."""
    with pytest.raises(ConfigError, match=r'schedule.phases\[1\].iterations: expected an integer, got the string "2"'):
        load_config(None, ['schedule.phases=[{"name": "a", "iterations": "2"}]'])
    config = load_config(None, ['schedule.phases=[{"name": "a", "iterations": 2, "set": ["sample.k=4"]}]'])
    assert config.schedule.phases[0].iterations == 2 and config.run.iterations == 2


@pytest.mark.parametrize("workdir", ["", "  "])
def test_a_new_run_with_an_empty_workdir_is_refused_and_writes_nothing(tmp_path, capsys, workdir, monkeypatch):
    """Empty, each run's directory was made in the current directory (a fuzzing audit found one in the checkout).
    Refused when a run is created, naming the --set; a run stored with one before still loads (its directory is
    recorded), so the check is not on the field."""
    from engine.__main__ import main

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "s.duckdb"
    root = Path(__file__).resolve().parents[1]
    assert main(["run", "--config", str(root / "examples" / "demo.toml"), "--db", str(db), "--quiet",
                 "--set", f"run.workdir={workdir}"]) == 2
    assert capsys.readouterr().err == ("error: --set run.workdir=: run.workdir: must not be empty (the "
                                       "run's directory would be made in the current directory, among your files)\n")
    assert not db.exists() and list(tmp_path.iterdir()) == []
    assert load_config(None, [f"run.workdir={workdir}"]).run.workdir == ""  # a stored snapshot still reads back
