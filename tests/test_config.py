"""Config loading: presets validate, TOML/YAML, --set overrides, errors that name the field and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import config_from_dict, config_to_dict, field_help, load_config, parse_overrides
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
    with pytest.raises(ConfigError, match=r"bad.toml: sample.k: expected an integer"):
        load_config(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("[sample\n")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(broken)
    with pytest.raises(ConfigError, match="malformed"):
        parse_overrides(["malformed"])


def test_every_field_has_help():
    assert all(text for text in field_help().values())
