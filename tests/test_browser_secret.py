"""studio.browser_secret: the key of the studio's browser storage outlives a restart (curators kept their name, place
and filters only until the studio restarted: Gradio's default key is new per server)."""

from __future__ import annotations

import os
import stat

from studio.browser_secret import ENV, FILE_NAME, browser_secret


def test_the_key_is_kept_beside_the_store_and_read_back_by_the_next_studio(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    first = browser_secret(tmp_path / "s.duckdb")
    assert len(first) == 64 and browser_secret(tmp_path / "s.duckdb") == first  # a restart reads the same key
    kept = tmp_path / FILE_NAME
    assert kept.read_text().strip() == first
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600  # its owner's only
    assert browser_secret(tmp_path / "other" / ".." / "t.duckdb") == first  # one key per directory of stores


def test_the_environment_wins_and_an_unwritable_directory_falls_back_to_a_key_per_process(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setenv(ENV, "from-the-space-secrets")
    assert browser_secret(tmp_path / "s.duckdb") == "from-the-space-secrets"
    assert not (tmp_path / FILE_NAME).exists()
    monkeypatch.delenv(ENV)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores the mode: make the key's path a directory instead
            (locked / FILE_NAME).mkdir()
        a, b = browser_secret(locked / "s.duckdb"), browser_secret(locked / "s.duckdb")
    finally:
        locked.chmod(0o700)
    assert a != b and len(a) == 64  # the old behaviour: a new key per studio
    assert "cannot keep a browser secret" in capsys.readouterr().err


def test_the_studio_encrypts_every_browser_state_with_it(tmp_path, monkeypatch):
    import gradio as gr

    from engine.store import Store
    from studio.app import build_app

    monkeypatch.setenv(ENV, "one-key")
    with Store(tmp_path / "s.duckdb") as store:
        demo = build_app(store, "examples/demo.toml")
        states = [b for b in demo.blocks.values() if isinstance(b, gr.BrowserState)]
        assert len(states) >= 3  # the place, the curator name, each tab's remembered filters
        assert {s.secret for s in states} == {"one-key"}
