"""``python app.py`` refuses a bad flag or environment value before it opens the store or builds the studio, as the
CLI reports bad input: ``error: WHERE: ...`` on stderr and exit 2, WHERE naming the flag or the variable. A mistyped
``--config`` once started the studio with an empty Run-tab editor, and a bad ``--auth`` exited 1 with no
``error:``. Each case runs the real script in a subprocess with a short timeout: none may get as far as serving."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLAG_ENV = ("MOAT_CONFIG", "MOAT_AUTH", "MOAT_VIEWERS", "MOAT_DB", "SPACE_ID", "GRADIO_SERVER_PORT")


def start(args: list[str], tmp_path: Path, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    """``app.py ARGS`` with a store under ``tmp_path`` and an unused port; killed (a failure) if it starts serving."""
    environ = {k: v for k, v in os.environ.items() if k not in FLAG_ENV} | env
    db = tmp_path / "studio.duckdb"
    try:
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), "--db", str(db), "--port", "1", *args],
                              cwd=cwd, env=environ, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:  # run() has killed it: no server is left behind
        pytest.fail(f"app.py {' '.join(args)} did not stop at its flags")
    assert not db.exists(), "the store was opened before the flags were checked"
    return done


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--config", "nosuch.toml"], {}, "error: --config: no such file: nosuch.toml\n"),
    (["--config=nosuch.toml"], {}, "error: --config: no such file: nosuch.toml\n"),
    ([], {"MOAT_CONFIG": "typo.toml"}, "error: MOAT_CONFIG: no such file: typo.toml\n"),
    (["--config", "examples"], {}, "error: --config: not a file: examples\n"),
    (["--auth", "foo"], {}, "error: --auth: expected user:password or a file of such lines, got 'foo' (no such "
                            "file)\n"),
    ([], {"MOAT_AUTH": "nopassword"}, "error: MOAT_AUTH: expected user:password or a file of such lines, got a "
                                      "value with no ':' (no such file)\n"),
    (["--viewers", "ann:pw1,ben:pw2"], {}, "error: --viewers: one user:password inline, got what looks like a list"),
])
def test_a_bad_flag_stops_start_up_with_exit_2(tmp_path, args, env, message):
    done = start(args, tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stdout == ""


def test_a_bad_line_in_an_auth_file_names_the_file_and_line(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("# team\nann:pw1\nben pw2\n", encoding="utf-8")
    done = start(["--auth", str(users)], tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"error: --auth: {users}:3: expected user:password, got no ':' between user and password "
                           "(the line is not shown: it may hold a password)\n")


@pytest.mark.parametrize(("line", "what"), [
    ("ben:", "an empty password for user 'ben'"),
    (":s3cret-pw", "an empty user name"),
    ("s3cret-pw", "no ':' between user and password"),
])
def test_an_auth_error_never_shows_a_password(tmp_path, line, what):
    """The message goes to a terminal or a Space's logs: it says what is wrong with the line, not what the line is."""
    users = tmp_path / "users.txt"
    users.write_text(f"ann:pw1\n{line}\n", encoding="utf-8")
    done = start(["--auth", str(users)], tmp_path)
    assert done.returncode == 2
    assert f"{users}:2: expected user:password, got {what}" in done.stderr
    assert "s3cret" not in done.stderr and "pw1" not in done.stderr
    inline = start([], tmp_path, MOAT_AUTH=line)
    assert inline.returncode == 2 and "s3cret" not in inline.stderr, inline.stderr


def test_the_default_config_is_looked_for_from_the_working_directory(tmp_path):
    """Started elsewhere, the default ``examples/demo.toml`` is not there: said so, with what to do."""
    done = start([], tmp_path, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --config: no such file: examples/demo.toml (the default")
    assert "give --config FILE" in done.stderr


def test_a_bad_port_in_the_environment_is_a_usage_error(tmp_path):
    """``GRADIO_SERVER_PORT=abc`` crashed with a ``ValueError`` traceback while the arguments were being declared."""
    environ = {k: v for k, v in os.environ.items() if k not in FLAG_ENV} | {"GRADIO_SERVER_PORT": "abc"}
    done = subprocess.run([sys.executable, str(ROOT / "app.py"), "--db", str(tmp_path / "s.duckdb")], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "error: argument --port: invalid int value: 'abc'" in done.stderr and "Traceback" not in done.stderr
