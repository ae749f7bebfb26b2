"""``python -m engine config``: the whole run config with every field's help, the list of what ``--set`` can change.

An audit found that ``run --help`` named two example fields and nothing said where the others were: a researcher read
``engine/config*.py`` to find ``train_limit`` or ``lora``. The command prints what ``run`` would use."""

from __future__ import annotations

import dataclasses

from engine.__main__ import main
from engine.config import RunConfig, field_help, load_config


def test_it_prints_a_config_run_reads_back_with_every_fields_help(tmp_path, capsys):
    assert main(["config", "--config", "examples/demo.toml", "--set", "sample.k=3"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "resolved.toml"
    path.write_text(text, encoding="utf-8")
    assert load_config(path) == load_config("examples/demo.toml", ["sample.k=3"])
    lines = text.splitlines()
    for dotted, help_text in field_help().items():
        section, name = dotted.split(".")
        at = lines.index(f"[{section}]")
        end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("[")), len(lines))
        own = lines[at:end]
        field_line = next(i for i, line in enumerate(own) if line.startswith(f"{name} = "))
        comment = []
        for line in reversed(own[:field_line]):
            if not line.startswith("# "):
                break
            comment.insert(0, line[2:])
        assert " ".join(comment) == " ".join(help_text.split()), dotted


def test_sections_can_be_picked_and_a_bad_value_is_refused_as_run_refuses_it(capsys):
    assert main(["config", "--section", "sample", "--section", "dpo"]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert heads == ["[sample]", "[dpo]"]
    assert main(["config", "--set", "sample.k=1"]) == 2
    refused = "error: --set sample.k=1: sample.k: must be >= 2 (a pair needs two plans), got 1\n"
    assert capsys.readouterr().err == refused
    assert main(["config", "--section", "sampel"]) == 2
    sections = ", ".join(f.name for f in dataclasses.fields(RunConfig))
    assert capsys.readouterr().err == f"error: --section: no section 'sampel' (sections: {sections})\n"


def test_run_help_says_where_the_fields_are(capsys):
    try:
        main(["run", "--help"])
    except SystemExit:
        pass
    assert "python -m engine config" in " ".join(capsys.readouterr().out.split())
