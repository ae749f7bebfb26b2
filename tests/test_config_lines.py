"""Config and experiment errors name the field's line in a TOML or YAML file (``engine.config_lines``), and a YAML
file that gives one key twice is refused at the second (PyYAML alone keeps the last without a word)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import load_config
from engine.config_lines import file_line_source
from engine.errors import ConfigError
from engine.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo.toml"

TOML = """\
# a comment
top.dotted = 1
[sample]
k = 4
notes = '''
k = 5
'''
[ sample . inner ]
x = 1
[[data.sources]]
path = "a"
[[data.sources]]
path = "b"
[variants.full]
set = []
["quoted.table"]
k = 9
"""


@pytest.mark.parametrize(("field", "line"), [
    ("top.dotted", 2),
    ("sample", 3),            # a whole table: its header
    ("sample.k", 4),          # not line 6, which is inside a multi-line string
    ("sample.inner.x", 9),    # spaces around the header's dots
    ("data.sources[2].path", 13),
    ("data.sources[2]", 12),
    ("variants.full.set", 15),
    ("sample.missing", None),
    ("data.sources[3].path", None),
    ("k", None),              # only under a quoted header, which the scan cannot name
    ("not a field!", None),
])
def test_a_toml_field_is_found_on_its_own_line_or_not_at_all(tmp_path, field, line):
    path = tmp_path / "c.toml"
    path.write_text(TOML, encoding="utf-8")
    assert file_line_source(path, field) == (f"{path}:{line}" if line else None)


YAML = """\
sample:
  k: 4
  notes: |
    k: 5
data:
  sources:
    - path: a
    - format: tasks
      path: b
"""


@pytest.mark.parametrize(("field", "line"), [
    ("sample", 1), ("sample.k", 2), ("data.sources[2]", 8), ("data.sources[2].path", 9),
    ("data.sources[3]", None), ("sample.k.deeper", None), ("nowhere", None),
])
def test_a_yaml_field_is_found_from_the_parsers_own_marks(tmp_path, field, line):
    path = tmp_path / "c.yaml"
    path.write_text(YAML, encoding="utf-8")
    assert file_line_source(path, field) == (f"{path}:{line}" if line else None)


def test_a_bad_yaml_value_names_its_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('dpo:\n  beta: 0.1\nsample:\n  k: "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f'{path}:4: sample.k: expected an integer, got the string "x"'


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_a_yaml_section_given_twice_is_refused_at_the_second(tmp_path, suffix):
    """Before, the second [sample]-like block replaced the first whole: k = 4 was dropped unsaid."""
    path = tmp_path / f"c{suffix}"
    path.write_text("sample:\n  k: 4\ndpo:\n  beta: 0.1\nsample:\n  top_p: 0.9\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:5: sample: given twice (first on line 1)")


def test_a_yaml_key_given_twice_inside_a_section_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  k: 4\n  k: 8\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.yaml:3: k: given twice \(first on line 2\)"):
        load_config(path)


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    """``<<: *base`` then ``k: 8`` is YAML's way to override on purpose, not a duplicate."""
    path = tmp_path / "c.yaml"
    path.write_text("defaults: &d\n  k: 4\n  top_p: 0.9\nsample:\n  <<: *d\n  k: 8\n", encoding="utf-8")
    from engine.config_file import read_config_file

    assert read_config_file(path)["sample"] == {"k": 8, "top_p": 0.9}


def test_an_experiment_file_in_yaml_names_its_lines_too(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(f"experiment:\n  name: x\n  base: {json.dumps(str(DEMO))}\n  seeds: [1]\n"
                    "variants:\n  full:\n    set: []\n  bad:\n    set: ['sample.k=1']\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"{path}:9: variants.bad.set: sample.k: must be >= 2")
