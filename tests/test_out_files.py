"""``--out`` and every other written file (``engine.out_files.write_file``: ``write_tasks``, the exports, ``eval
--traces``) is written through, not replaced, where a rename cannot reach: a new-user review found ``export --out
/dev/stdout`` printing "wrote 7 pairs rows" with nothing on stdout (and, as root, the system's /dev/stdout symlink
replaced by a regular file), ``--out link.jsonl`` turning the link into a plain file beside an untouched target,
``demo-world --out /proc/x.jsonl`` a traceback with exit 1, and ``write_tasks``' fixed ``OUT.tmp`` shared by two
writers and left behind by any failure but Ctrl-C.

Nothing under /dev is written: the descriptors are the test's own pipes and files (``/dev/fd/N``), the FIFO lives in
``tmp_path``, and the test checks /dev/stdout and /dev/null are as they were."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.export import write_jsonl, write_rows
from engine.store import Store
from engine.tasks import Task, load_tasks, write_tasks
from tests._store_world import IT, RUN, build_world

ROWS = [{"prompt": "p", "chosen": "c", "rejected": "r"}, {"prompt": "q", "chosen": "d", "rejected": "s"}]
JSONL = b'{"prompt": "p", "chosen": "c", "rejected": "r"}\n{"prompt": "q", "chosen": "d", "rejected": "s"}\n'
# The smallest demo world the CLI makes: 2 tasks, generated in well under a second.
SMALL = ["--maths-train", "1", "--qa-train", "1"] + [a for d in ("maths", "qa") for s in ("dev", "held-in", "held-out")
                                                     for a in (f"--{d}-{s}", "0")]


def tasks(n: int = 3) -> list[Task]:
    return [Task(id=f"t{i}", domain="maths", source="test", split="train", question=f"{i} + 1?", answer=str(i + 1))
            for i in range(n)]


@pytest.fixture(autouse=True)
def dev_untouched() -> Iterator[None]:
    """The system's /dev/stdout stays a symlink and /dev/null a character device, whatever a test does."""
    before = (os.lstat("/dev/stdout").st_mode, os.readlink("/dev/stdout"), os.lstat("/dev/null").st_mode)
    yield
    after = (os.lstat("/dev/stdout").st_mode, os.readlink("/dev/stdout"), os.lstat("/dev/null").st_mode)
    assert after == before and stat.S_ISLNK(after[0]) and stat.S_ISCHR(after[2])


@contextmanager
def fifo(path: Path) -> Iterator[Callable[[], bytes]]:
    """A FIFO at ``path`` read to its end by a thread; yields a function giving what it read once the writer is
    done. The thread reads through a second name (a hard link), so a writer that renames a file over ``path``
    cannot leave it blocked: it is released with no bytes, and the test fails on them instead of hanging."""
    os.mkfifo(path)
    keep = path.with_name(path.name + ".reader")
    os.link(path, keep)
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(keep.read_bytes()), daemon=True)
    thread.start()

    def received() -> bytes:
        thread.join(10)
        if thread.is_alive():  # the writer never opened the FIFO: open and close it to give the reader its end
            os.close(os.open(keep, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(10)
        keep.unlink()
        return got[0] if got else b""

    yield received


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- symlinks: the target is replaced, the link kept --------------------------------------------------------


@pytest.mark.parametrize("write", ["tasks", "jsonl", "parquet"])
def test_a_symlink_is_written_through_to_its_target(tmp_path, write):
    target_dir = tmp_path / "data"
    target_dir.mkdir()
    target = target_dir / "real.out"
    target.write_text("old\n")
    target.chmod(0o604)
    link = tmp_path / "link.out"
    link.symlink_to(Path("data") / "real.out")  # relative, as ``ln -s`` users write them
    if write == "tasks":
        assert write_tasks(tasks(), link) == 3
        assert [t.id for t in load_tasks(target)] == ["t0", "t1", "t2"]
    elif write == "jsonl":
        assert write_jsonl(ROWS, link) == 2 and target.read_bytes() == JSONL
    else:
        import pyarrow.parquet as pq

        assert write_rows("pairs", [dict(r, chosen_logppl=0.0, rejected_logppl=0.0, task_id="t", step=0)
                                    for r in ROWS], link, "parquet") == 2
        assert pq.read_table(target).num_rows == 2
    assert link.is_symlink() and os.readlink(link) == str(Path("data") / "real.out")
    assert stat.S_IMODE(target.stat().st_mode) == 0o604  # the target's mode, as ``open(link, "w")`` keeps it
    assert names(tmp_path) == ["data", "link.out"] and names(target_dir) == ["real.out"]  # no temp file anywhere


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "new.jsonl")
    write_jsonl(ROWS, link)
    assert link.is_symlink() and (tmp_path / "new.jsonl").read_bytes() == JSONL


# --- what no rename can reach: written straight into ----------------------------------------------------------


@pytest.mark.parametrize("write", ["tasks", "jsonl", "parquet"])
def test_a_fifo_receives_the_bytes_and_stays_a_fifo(tmp_path, write):
    path = tmp_path / "pipe"
    with fifo(path) as received:
        if write == "tasks":
            write_tasks(tasks(), path)
        elif write == "jsonl":
            write_jsonl(ROWS, path)
        else:
            write_rows("rollouts", [], path, "parquet")
        data = received()
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    if write == "tasks":
        assert data.decode().count('"id": "t') == 3
    elif write == "jsonl":
        assert data == JSONL
    else:
        assert data.startswith(b"PAR1") and data.endswith(b"PAR1")
    assert names(tmp_path) == ["pipe"]


def test_a_pipe_named_by_its_descriptor_receives_the_bytes(tmp_path):
    """``--out /dev/fd/N`` (a shell's ``>(...)``), as ``--out /dev/stdout`` is with stdout a pipe."""
    read, write = os.pipe()
    try:
        write_jsonl(ROWS, f"/dev/fd/{write}")
        os.close(write)
        write = -1
        with os.fdopen(read, "rb") as pipe:
            read = -1
            assert pipe.read() == JSONL
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)


def test_a_descriptor_open_on_a_file_is_appended_to_not_replaced(tmp_path):
    """``--out /dev/stdout >> log``: the rows follow what the log held (a rename put a new file under the shell)."""
    log = tmp_path / "log"
    with open(log, "w") as out:
        out.write("before\n")
        out.flush()
        write_jsonl(ROWS, f"/dev/fd/{out.fileno()}")
        inode = os.fstat(out.fileno()).st_ino
    assert log.read_bytes() == b"before\n" + JSONL and log.stat().st_ino == inode
    assert names(tmp_path) == ["log"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        build_world(store)
    return path


def test_export_out_a_fifo_and_a_symlink(db, tmp_path, capsys):
    path = tmp_path / "pipe"
    argv = ["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--out"]
    with fifo(path) as received:
        assert main([*argv, str(path)]) == 0
        data = received()
    assert data.count(b'"chosen"') >= 1 and stat.S_ISFIFO(os.lstat(path).st_mode)
    assert "wrote" in capsys.readouterr().out
    target = tmp_path / "real.jsonl"
    (tmp_path / "link.jsonl").symlink_to(target)
    assert main([*argv, str(tmp_path / "link.jsonl")]) == 0
    assert (tmp_path / "link.jsonl").is_symlink() and target.read_bytes() == data


# --- demo-world: a clear error, exit 2; through a symlink or a FIFO -------------------------------------------


def test_demo_world_to_a_folder_that_takes_no_file_is_error_out_exit_2(capsys):
    assert (Path("/proc") / "self").is_dir(), "needs Linux /proc: a folder that takes no new file, even for root"
    assert main(["demo-world", *SMALL, "--out", "/proc/x.jsonl"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --out: cannot write /proc/x.jsonl: cannot create a file in /proc")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err and captured.out == ""


def test_demo_world_failing_to_write_is_error_out_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """A write that fails after the up-front check (a full disk) is the same error, the old file as it was."""
    out = tmp_path / "tasks.jsonl"
    out.write_text("old\n")

    class FullDisk(Task):
        def to_dict(self) -> dict:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("engine.demo.world.generate_suite", lambda _config: [*tasks(2), FullDisk(**vars(tasks(1)[0]))])
    assert main(["demo-world", *SMALL, "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"error: --out: cannot write {out}: No space left on device\n"
    assert out.read_text() == "old\n" and names(tmp_path) == ["tasks.jsonl"]


def test_demo_world_writes_through_a_symlink_and_into_a_fifo(tmp_path, capsys):
    target = tmp_path / "suite.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert main(["demo-world", *SMALL, "--out", str(link)]) == 0
    assert link.is_symlink() and len(list(load_tasks(target))) == 2
    path = tmp_path / "pipe"
    with fifo(path) as received:
        assert main(["demo-world", *SMALL, "--out", str(path)]) == 0
        assert received() == target.read_bytes()
    assert stat.S_ISFIFO(os.lstat(path).st_mode) and names(tmp_path) == ["link.jsonl", "pipe", "suite.jsonl"]


@pytest.mark.parametrize("command", ["demo-world", "export"])
def test_out_stdout_carries_only_the_data_and_the_summary_goes_to_stderr(db, tmp_path, command):
    """``--out /dev/stdout | jq``: the one-line summary was printed after the data on the same stream, a last line
    that is no record. A process of its own, so stdout is a real pipe (pytest's capture is not a file)."""
    import json
    import subprocess
    import sys

    argv = ({"demo-world": ["demo-world", *SMALL],
             "export": ["export", "--db", str(db), "--run", RUN, "--iteration", str(IT), "--what", "pairs", "--json"]}
            [command])
    done = subprocess.run([sys.executable, "-m", "engine", *argv, "--out", "/dev/stdout"], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records and all(("question" if command == "demo-world" else "chosen") in r for r in records), done.stdout
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    assert summary.get("out", summary.get("path")) == "/dev/stdout"
    assert summary.get("count", summary.get("rows")) == len(records)


# --- write_tasks' temp file: unique, and gone after any failure ----------------------------------------------


def test_write_tasks_failing_midway_leaves_the_file_and_no_temp_file(tmp_path):
    out = tmp_path / "tasks.jsonl"
    out.write_text("old\n")

    def broken() -> Iterator[Task]:
        yield from tasks(2)
        raise ValueError("a bad record")

    with pytest.raises(ValueError, match="a bad record"):
        write_tasks(broken(), out)
    assert out.read_text() == "old\n" and names(tmp_path) == ["tasks.jsonl"]


def test_write_tasks_never_touches_another_writers_temp_file(tmp_path):
    """The fixed ``OUT.tmp`` was shared: a second writer truncated the first's and renamed it away."""
    out = tmp_path / "tasks.jsonl"
    other = tmp_path / "tasks.jsonl.tmp"
    other.write_text("another writer's half\n")
    write_tasks(tasks(), out)
    assert other.read_text() == "another writer's half\n" and len(list(load_tasks(out))) == 3
