"""A boolean where a string field expects one of its choices: ``bf16`` (auto | true | false) takes a file's
true/false (TOML's ``bf16 = false``, TRL's YAML ``bf16: true``) and ``--set`` text in any case, as a bool field does;
every other string field still refuses a boolean, naming file, line and field, and the "write it in quotes" hint
never suggests a value the field's choices would then refuse (it once said ``"False"``, which bf16 refused next)."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from engine.config import RunConfig, load_config
from engine.errors import ConfigError

SECTIONS = ("dpo", "sft", "grpo", "grpo_grounder")


def choice_fields() -> list[tuple[str, tuple[str, ...]]]:
    """``(section.field, choices)`` for every string field of every section that declares choices."""
    out = []
    for section in dataclasses.fields(RunConfig):
        cls = type(section.default_factory())
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if f.metadata.get("choices") and (hint is str or typing.get_origin(hint) is typing.Literal):
                out.append((f"{section.name}.{f.name}", tuple(f.metadata["choices"])))
    return out


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize(("written", "read"), [("false", "false"), ("true", "true")])
def test_a_toml_boolean_is_bf16s_on_or_off(tmp_path, section, written, read):
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\nbf16 = {written}\n", encoding="utf-8")
    assert getattr(load_config(path), section).bf16 == read


def test_a_yaml_boolean_is_bf16s_on_or_off(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dpo:\n  bf16: true\nsft:\n  bf16: false\n", encoding="utf-8")
    config = load_config(path)
    assert (config.dpo.bf16, config.sft.bf16, config.grpo.bf16) == ("true", "false", "auto")


@pytest.mark.parametrize(("setting", "read"), [("False", "false"), ("TRUE", "true"), ("Auto", "auto"),
                                               ("false", "false")])
def test_set_takes_bf16_in_any_case(setting, read):
    config = load_config(None, [f"dpo.bf16={setting}", f"grpo_grounder.bf16={setting}"])
    assert (config.dpo.bf16, config.grpo_grounder.bf16, config.sft.bf16) == (read, read, "auto")


def test_bf16_still_refuses_what_is_neither(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[dpo]\nbf16 = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.toml:2: dpo.bf16: expected one of auto, true, false, got 1$"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"--set dpo.bf16=maybe: dpo.bf16: 'maybe' is not one of auto, true, false"):
        load_config(None, ["dpo.bf16=maybe"])


@pytest.mark.parametrize(("field", "choices"), choice_fields())
@pytest.mark.parametrize("written", ["true", "false"])
def test_a_quote_hint_never_names_a_refused_choice(tmp_path, field, choices, written):
    """Each choice field given a bare boolean in a file: read as a choice (bf16's true/false), or refused naming
    file, line and field, without a hint to quote a value the choices refuse."""
    section, name = field.split(".")
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\n{name} = {written}\n", encoding="utf-8")
    try:
        config = load_config(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:2: {field}: "), str(exc)
        hinted = exc.message.partition("write it in quotes: ")[2].strip('")')
        assert not hinted or hinted in choices, str(exc)
    else:
        assert set(choices) >= {"true", "false"} and getattr(getattr(config, section), name) == written


@pytest.mark.parametrize(("body", "message"), [
    ("[critic]\nbackend = true\n", r"c.toml:2: critic.backend: expected one of reference, openai, hf, got True$"),
    ("[run]\nname = false\n", r"c.toml:2: run.name: expected a string, got False$"),
    ("[run]\nname = 5\n", r'c.toml:2: run.name: expected a string, got 5 \(write it in quotes: "5"\)$'),
    ("[critic]\nbackend = 5\n", r"c.toml:2: critic.backend: expected one of reference, openai, hf, got 5$"),
    ("[[data.sources]]\npath = 'x.jsonl'\nformat = 5\n",
     r"c.toml:3: data.sources\[1\].format: expected one of tasks, lumos, .*, got 5$"),
    ("[[data.sources]]\npath = true\n", r"c.toml:2: data.sources\[1\].path: expected a string, got True$"),
    ('[dpo]\nbf16 = "False"\n', r"c.toml:2: dpo.bf16: 'False' is not one of auto, true, false"),
    ('[dpo]\nlora = "False"\n', r'c.toml:2: dpo.lora: expected true or false, got the string "False"$'),
])
def test_other_type_errors_stay_strict(tmp_path, body, message):
    path = tmp_path / "c.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_config(path)
