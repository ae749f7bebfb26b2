"""Paths a browser sends stay in the workspace: ``engine.workspace`` and the studio's export file name. The CLI is
not confined (its caller owns the shell): ``tests/test_export.py::test_export_cli`` writes to an explicit path."""

from __future__ import annotations

import os

import pytest

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.workspace import PathOutsideWorkspace, config_paths_inside, inside


@pytest.fixture
def root(tmp_path):
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (ws / "out-link").symlink_to(tmp_path / "outside")
    (ws / "in-link").symlink_to(ws / "data")
    return ws


def test_inside_accepts_the_root_and_below(root):
    assert inside(root, root) == root.resolve()
    assert inside(root, root / "data" / "new.jsonl") == (root / "data" / "new.jsonl").resolve()
    assert inside(root, root / "in-link" / "x") == (root / "data" / "x").resolve()  # a link that stays inside
    assert inside(root, root / "data" / ".." / "data") == (root / "data").resolve()


@pytest.mark.parametrize("escape", ["../outside/x", "data/../../outside", "/etc/passwd", "out-link/x", "out-link",
                                    "~/x"])
def test_inside_refuses_escapes(root, escape):
    path = escape if escape.startswith(("/", "~")) else str(root / escape)
    with pytest.raises(PathOutsideWorkspace, match="must be inside the workspace") as info:
        inside(root, path, "data.tasks")
    # The message reaches a browser (a Spaces visitor): the path as sent, never the server's directories.
    assert str(root.resolve()) not in str(info.value).replace(path, "") and repr(path) in str(info.value)
    assert ("symbolic link" in str(info.value)) == escape.startswith("out-link")


def test_relative_paths_resolve_from_the_working_directory(root, monkeypatch):
    monkeypatch.chdir(root)
    assert inside(root, "data/t.jsonl") == (root / "data" / "t.jsonl").resolve()
    with pytest.raises(PathOutsideWorkspace):
        inside(root, "../outside")


def test_config_paths_name_the_field(root):
    config = RunConfig()
    for section, name in (("run", "workdir"), ("data", "tasks"), ("planner", "path"), ("grounder", "path")):
        setattr(getattr(config, section), name, str(root / "data"))
    config_paths_inside(config, root)  # the accelerate config is not read in inprocess mode: not checked
    config.sft.original_data = str(root / "out-link" / "gold.jsonl")
    with pytest.raises(ConfigError, match=r"sft\.original_data.*inside the workspace"):
        config_paths_inside(config, root)
    config.sft.original_data = ""
    config.launch.mode = "accelerate"
    with pytest.raises(ConfigError, match=r"launch\.accelerate_config"):
        config_paths_inside(config, root)


def test_studio_export_file_never_leaves_its_directory(tmp_path):
    from engine.store import Store
    from studio.tab_export import export_file, export_path
    from tests._store_world import RUN, build_world

    out = tmp_path / "exports"
    out.mkdir()
    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        for run_id in ("../../escape", "/etc/x", "a/../../b", RUN):
            path = export_path(run_id, 0, "pairs", "jsonl", out)
            assert path.parent == out.resolve() and "/" not in path.name
        path, _ = export_file(store, RUN, 0, "pairs", "jsonl", out)
        assert path.parent == out.resolve()
        for kind, fmt in (("pairs", "../../x"), ("../x", "jsonl"), ("pairs", "jsonl/../../x")):
            with pytest.raises(ValueError):
                export_file(store, RUN, 0, kind, fmt, out)
    assert not (tmp_path / "escape-it0-pairs.jsonl").exists()
    written = {p for p in tmp_path.rglob("*") if p.is_file()} - {tmp_path / "ws.duckdb"}
    assert all(out in p.parents for p in written if not p.name.startswith("ws.duckdb")), written
    assert os.listdir(out)
