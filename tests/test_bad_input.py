"""Bad data files get a located error (``path:line: field: message``) from every loader, and nothing half-imports.

Each loader gets the same hostile files: bad JSON, an empty file, a 50 MB single line, latin-1 bytes, UTF-16, a
BOM, duplicate ids, missing and mistyped fields. The import paths (``load`` CLI, ``create_run``, ``engine run``)
write nothing when the file is bad.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.errors import DataError
from engine.formats import load
from engine.prompts import PLANNER_INSTRUCTION, PLANNER_TASK_SUFFIX
from engine.tasks import MAX_LINE_BYTES


def lumos_plan(record_id: str, question: str = "Add 1 and 2.") -> dict:
    return {"dataset": "maths", "id": record_id, "messages": [
        {"role": "user", "content": f"{PLANNER_INSTRUCTION}Task: {question}{PLANNER_TASK_SUFFIX}"},
        {"role": "assistant", "content": "Subgoal 1: Add 1 and 2."},
    ]}


# One valid record per format (with its own id key), a required field, and a mistyped value for it.
VALID = {
    "tasks": ({"id": "t1", "domain": "maths", "split": "train", "question": "q?"}, "id", "question", 7),
    "gsm8k": ({"id": "g1", "question": "q?", "answer": "x\n#### 1"}, "id", "answer", ["1"]),
    "svamp": ({"ID": "s1", "Body": "b", "Question": "q", "Answer": 1}, "ID", "Answer", "one"),
    "hotpotqa": ({"_id": "h1", "question": "q", "answer": "a"}, "_id", "question", None),
    "strategyqa": ({"qid": "s1", "question": "q", "answer": True}, "qid", "answer", "yes"),
    "lumos": (lumos_plan("l1"), "id", "messages", "hi"),
}
FORMATS = list(VALID)


def record(fmt: str, record_id: str) -> dict:
    row, id_key, _, _ = VALID[fmt]
    return {**json.loads(json.dumps(row)), id_key: record_id}


def write_lines(path: Path, lines: list, encoding: str = "utf-8") -> Path:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_bytes(text.encode(encoding))
    return path


def assert_create_run_writes_nothing(tmp_path: Path, config, match: str) -> None:
    """``create_run`` raises a located ``DataError`` matching ``match`` and leaves no run, task or run directory."""
    from engine.loop import create_run
    from engine.store import Store

    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(DataError, match=match):
            create_run(store, config)
        assert store.list_runs() == []
        assert int(store.query("SELECT count(*) AS n FROM tasks")["n"][0]) == 0
    assert not (tmp_path / "runs").exists()


def located(fmt: str, path: Path, line: int | None, field: str) -> DataError:
    with pytest.raises(DataError) as info:
        list(load(fmt, path))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(err).startswith(f"{where}: {field}: ")
    return err


@pytest.mark.parametrize("fmt", FORMATS)
def test_valid_record_loads(tmp_path, fmt):
    (task,) = load(fmt, write_lines(tmp_path / "ok.jsonl", [record(fmt, "a")]))
    assert task.id == "a"


@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_json_names_the_line(tmp_path, fmt):
    path = write_lines(tmp_path / "bad.jsonl", [record(fmt, "a"), '{"id": "b", oops}'])
    assert "invalid JSON at column" in str(located(fmt, path, 2, "<json>"))
    for text, message in (("[" * 100_000, "nested too deeply"), ('{"x": NaN}', "NaN is not valid JSON")):
        path = write_lines(tmp_path / "weird.jsonl", [text])
        assert message in str(located(fmt, path, 1, "<json>"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_and_blank_files(tmp_path, fmt):
    for name, content in (("empty.jsonl", b""), ("blank.jsonl", b"\n  \n\t\n")):
        path = tmp_path / name
        path.write_bytes(content)
        assert "no records" in str(located(fmt, path, None, "<file>"))
    assert "cannot open" in str(located(fmt, tmp_path / "missing.jsonl", None, "<file>"))
    assert "cannot" in str(located(fmt, tmp_path, None, "<file>"))  # a directory


@pytest.fixture(scope="module")
def huge_line_file(tmp_path_factory) -> Path:
    """One 50 MB line (no newline at all), written in 1 MB chunks."""
    path = tmp_path_factory.mktemp("huge") / "huge.jsonl"
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        out.write(b'{"question": "')
        for _ in range(50):
            out.write(chunk)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_50mb_line_is_rejected_with_bounded_memory(huge_line_file, fmt):
    tracemalloc.start()
    started = time.perf_counter()
    try:
        err = located(fmt, huge_line_file, 1, "<line>")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"longer than {MAX_LINE_BYTES} bytes" in str(err)
    assert peak < 3 * MAX_LINE_BYTES  # read at most the cap, never the 50 MB line
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_encodings(tmp_path, fmt):
    good = json.dumps(record(fmt, "a"))
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(good.encode() + b"\n" + json.dumps(record(fmt, "b")).replace('"b"', '"caf\\u00e9"')
                      .encode().replace(b"\\u00e9", b"\xe9") + b"\n")
    assert "not valid UTF-8 (byte 0xe9" in str(located(fmt, latin, 2, "<encoding>"))
    for encoding in ("utf-16", "utf-16-be"):
        utf16 = tmp_path / f"{encoding}.jsonl"
        text = "\ufeff" + good + "\n" if encoding == "utf-16-be" else good + "\n"  # "utf-16" writes its own BOM
        utf16.write_bytes(text.encode(encoding))
        assert "UTF-16" in str(located(fmt, utf16, 1, "<encoding>"))
    # A UTF-8 BOM (Windows editors) is not an error: it is dropped.
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\n")
    assert [t.id for t in load(fmt, bom)] == ["a"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_ids(tmp_path, fmt):
    _, id_key, _, _ = VALID[fmt]
    path = write_lines(tmp_path / "dup.jsonl", [record(fmt, "a"), record(fmt, "b"), record(fmt, "a")])
    err = located(fmt, path, 3, id_key)
    assert "duplicate id 'a' (first on line 1)" in str(err)


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_and_mistyped_fields(tmp_path, fmt):
    _, _, required, wrong = VALID[fmt]
    missing = record(fmt, "b")
    del missing[required]
    path = write_lines(tmp_path / "missing.jsonl", [record(fmt, "a"), missing])
    located(fmt, path, 2, required)
    path = write_lines(tmp_path / "typed.jsonl", [record(fmt, "a"), {**record(fmt, "b"), required: wrong}])
    located(fmt, path, 2, required)
    path = write_lines(tmp_path / "array.jsonl", [record(fmt, "a"), [1, 2]])
    located(fmt, path, 2, "<record>")


@pytest.mark.parametrize("fmt", FORMATS)
def test_nothing_is_yielded_before_a_late_error(tmp_path, fmt):
    rows = [record(fmt, f"r{i}") for i in range(5)] + ["{broken"]
    tasks = load(fmt, write_lines(tmp_path / "late.jsonl", rows))
    with pytest.raises(DataError) as info:
        next(tasks)  # the first task is withheld until line 6 has been read
    assert info.value.line == 6


def test_lumos_grounder_file_errors_are_located(tmp_path):
    plan = write_lines(tmp_path / "plan.jsonl", [lumos_plan("a")])
    ground = tmp_path / "ground.jsonl"
    ground.write_bytes(b"\xff\xfe{}")
    with pytest.raises(DataError) as info:
        list(load("lumos", plan, ground=ground))
    assert (info.value.path, info.value.line, info.value.field) == (str(ground), 1, "<encoding>")


def test_cli_load_prints_nothing_on_error(tmp_path, capsys):
    path = write_lines(tmp_path / "g.jsonl", [record("gsm8k", "a"), record("gsm8k", "a")])
    assert main(["load", "--format", "gsm8k", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"error: {path}:2: id: duplicate id")


def test_create_run_with_a_bad_task_file_writes_nothing(tmp_path):
    from engine.config import load_config

    path = write_lines(tmp_path / "t.jsonl", [record("tasks", "a"), record("tasks", "b"), "{broken"])
    config = load_config(None, [f"data.tasks={path}", f"run.workdir={tmp_path / 'runs'}"])
    assert_create_run_writes_nothing(tmp_path, config, r"t.jsonl:3: <json>")


def test_cli_run_with_a_bad_task_file_exits_2_and_writes_nothing(tmp_path, capsys):
    from engine.store import Store

    path = write_lines(tmp_path / "t.jsonl", [record("tasks", "a"), {**record("tasks", "b"), "split": "validation"}])
    db = tmp_path / "s.duckdb"
    code = main(["run", "--db", str(db), "--quiet", "--config", "examples/demo.toml", "--set", f"data.tasks={path}",
                 "--set", f"run.workdir={tmp_path / 'runs'}"])
    assert code == 2
    assert f"{path}:2: split: 'validation' is not one of" in capsys.readouterr().err
    assert not db.exists()  # the store this command created is gone again (it used to stay behind, empty)
    with Store(db) as store:
        assert store.list_runs() == []


def test_cli_run_refused_leaves_no_store_and_no_directory_behind(tmp_path, capsys):
    """A refused run used to leave an empty store (and the directories for it) behind; a store that existed before
    stays, with its runs."""
    from engine.store import Store
    from tests._store_world import RUN, build_world

    nested = tmp_path / "new" / "dir" / "s.duckdb"
    bad = tmp_path / "bad.toml"
    bad.write_text("[sample]\nk = 1\n")
    assert main(["run", "--db", str(nested), "--quiet", "--config", str(bad)]) == 2
    assert "sample.k" in capsys.readouterr().err and not (tmp_path / "new").exists()
    assert main(["run", "--db", str(nested), "--quiet", "--run", "nope"]) == 2
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "new").exists()
    assert main(["run", "--db", str(nested), "--quiet", "--iterations", "-1"]) == 2
    assert "--iterations must be 0 or more" in capsys.readouterr().err and not (tmp_path / "new").exists()
    kept = tmp_path / "kept.duckdb"
    with Store(kept) as store:
        build_world(store)
    assert main(["run", "--db", str(kept), "--quiet", "--config", str(bad)]) == 2
    with Store(kept) as store:
        assert [r["run_id"] for r in store.list_runs()] == [RUN]


@pytest.mark.parametrize("extra", [["--set", "dpo.bf16=false"], ["--config", "examples/demo.toml"]])
def test_cli_resume_refuses_config_changes_instead_of_ignoring_them(tmp_path, capsys, extra):
    """``run --run ID --set ...`` used to resume with the stored config, silently: the user believed fp32 was on."""
    from engine.store import Store
    from tests._store_world import RUN, build_world

    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        build_world(store)
        before = store.query("SELECT * FROM stages").to_dict("records")
    assert main(["run", "--db", str(db), "--run", RUN, "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert f"cannot change run {RUN!r}: a run keeps the config it was created with" in err and extra[0] in err
    with Store(db) as store:
        assert store.query("SELECT * FROM stages").to_dict("records") == before  # nothing ran


# ---------------------------------------------------------------- SVAMP as one JSON array document (SVAMP.json)


def write_array(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def svamp_array(rows: list) -> str:
    """Rows as SVAMP.json is laid out: an indented array, so each record starts on a line of its own."""
    return json.dumps(rows, indent=4)


def array_located(path: Path, line: int, record_number: int, field: str) -> DataError:
    with pytest.raises(DataError) as info:
        list(load("svamp", path))
    err = info.value
    assert (err.path, err.line, err.line.record, err.field) == (str(path), line, record_number, field), str(err)
    assert str(err).startswith(f"{path}:{line} (record {record_number}): {field}: ")
    return err


def test_svamp_array_errors_name_line_record_and_field(tmp_path):
    good = [record("svamp", "a"), record("svamp", "b")]
    third = {**record("svamp", "c"), "Answer": "one"}
    # json.dumps(indent=4): "[" on line 1, then each 4-key record takes 6 lines, so record n starts on line 6n - 4
    path = write_array(tmp_path / "typed.json", svamp_array([*good, third]))
    assert "must be a number, got str" in str(array_located(path, 14, 3, "Answer"))
    missing = record("svamp", "c")
    del missing["Question"]
    array_located(write_array(tmp_path / "missing.json", svamp_array([*good, missing])), 14, 3, "Question")
    array_located(write_array(tmp_path / "item.json", svamp_array([*good, [1, 2]])), 14, 3, "<record>")
    err = array_located(write_array(tmp_path / "dup.json", svamp_array([*good, record("svamp", "a")])), 14, 3, "ID")
    assert "duplicate id 'a' (first on line 2 (record 1))" in str(err)
    # one line holding the whole array: the record number is what tells the records apart
    path = write_array(tmp_path / "minified.json", json.dumps([*good, third]))
    array_located(path, 1, 3, "Answer")


GOOD_ROW = '{"ID": "a", "Body": "b", "Question": "q", "Answer": 1}'


@pytest.mark.parametrize(("text", "line", "message"), [
    (f'[\n  {GOOD_ROW},\n  {{"ID": "b", oops}}\n]', 3, "invalid JSON at column 15: Expecting property name"),
    (f'[\n  {GOOD_ROW},\n  {{"ID": "b", oops}}\n]', 3, "double quotes (in record 2)"),
    (f'[\n  {GOOD_ROW}\n  {{"ID": "b"}}\n]', 3, "expected ',' or ']' after record 1 at column 3, got '{'"),
    (f'[\n  {GOOD_ROW},\n]', 3, "invalid JSON at column 1: Expecting value (in record 2)"),  # a trailing comma
    (f'[\n  {GOOD_ROW},\n  {{"ID": "b"', 3, "invalid JSON at column"),  # cut off
    ('[\n  {"ID": "a", "Answer": NaN}\n]', 2, "NaN is not valid JSON (in record 1)"),
    ("[" + "[" * 100_000, 1, "JSON nested too deeply (in record 1)"),
    (f'[\n  {GOOD_ROW}\n]\n{{"ID": "b"}}', 4, "text after the array's closing ']' at column 1"),
])
def test_malformed_svamp_array_is_located(tmp_path, text, line, message):
    """Bad JSON in an array is located as in JSON lines (line, column), and the message names the record."""
    assert message in str(located("svamp", write_array(tmp_path / "bad.json", text), line, "<json>"))


def test_svamp_array_file_level_errors(tmp_path, monkeypatch):
    for text in ("[]", " \n[\n]\n"):
        assert "no records (the array is empty)" in str(located("svamp", write_array(tmp_path / "e.json", text),
                                                                None, "<file>"))
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'[\n {"ID": "a", "Body": "caf\xe9", "Question": "q", "Answer": 1}\n]')
    assert "not valid UTF-8 (byte 0xe9 at column 26)" in str(located("svamp", latin, 2, "<encoding>"))
    # The stated size limit: a bigger array is refused for the file, after reading no more than the limit.
    import engine.tasks

    monkeypatch.setattr(engine.tasks, "MAX_ARRAY_BYTES", 200)
    path = write_array(tmp_path / "big.json", svamp_array([record("svamp", f"r{i}") for i in range(5)]))
    err = located("svamp", path, None, "<file>")
    assert "larger than 200 bytes (MAX_ARRAY_BYTES); write it as JSON lines" in str(err)
    monkeypatch.undo()
    assert engine.tasks.MAX_ARRAY_BYTES == 64 * 1024 * 1024
    assert len(list(load("svamp", path))) == 5


def test_bad_svamp_array_imports_nothing(tmp_path, capsys):
    from engine.config import load_config

    path = write_array(tmp_path / "SVAMP.json", svamp_array([record("svamp", "a"), record("svamp", "b"),
                                                             {**record("svamp", "c"), "Answer": True}]))
    assert main(["load", "--format", "svamp", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"error: {path}:14 (record 3): Answer: must be a number")
    config = load_config(None, [f"data.tasks={path}", "data.format=svamp", f"run.workdir={tmp_path / 'runs'}"])
    assert_create_run_writes_nothing(tmp_path, config, r"SVAMP.json:14 \(record 3\): Answer")


def test_a_run_whose_evaluation_splits_have_no_tasks_is_refused_naming_the_field(tmp_path, capsys):
    """Training files only (every task in split ``train``) with the default ``evaluate.splits``: the evaluation
    stage would report nothing, so the run is refused before anything is written, naming the field and the splits
    the file has; listing only splits it has is accepted."""
    from engine.config import load_config
    from engine.errors import ConfigError
    from engine.runtime import check_eval_splits, load_run_tasks
    from engine.store import Store

    path = write_lines(tmp_path / "t.jsonl", [{**record("tasks", "a"), "split": "train"},
                                              {**record("tasks", "b"), "split": "held_in"}])
    config = load_config(None, [f"data.tasks={path}"])
    with pytest.raises(ConfigError) as info:
        check_eval_splits(config, load_run_tasks(config))
    assert info.value.field == "evaluate.splits"
    assert "no 'held_out' task" in info.value.message and "its splits: held_in, train" in info.value.message
    check_eval_splits(load_config(None, [f"data.tasks={path}", 'evaluate.splits=["held_in"]']),
                      load_run_tasks(config))
    db = tmp_path / "s.duckdb"
    code = main(["run", "--db", str(db), "--quiet", "--config", "examples/demo.toml", "--set", f"data.tasks={path}",
                 "--set", f"run.workdir={tmp_path / 'runs'}"])
    assert code == 2
    assert "evaluate.splits: no 'held_out' task" in capsys.readouterr().err
    with Store(db) as store:
        assert store.list_runs() == []
    assert not (tmp_path / "runs").exists()


LONE = "bad \ud800 half"  # json.dumps writes it as the escape \ud800, which JSON allows and UTF-8 cannot hold


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lone_surrogate_is_refused_at_its_line_and_field(tmp_path, fmt, capsys):
    """A ``\\ud800`` escape without its pair loaded as a string no store or JSON output can write: ``load --json``
    died in a traceback and ``run`` failed in the store's insert (exit 1), far from the file. It is refused where it
    is read, naming the field; a pair (an emoji written as two escapes) is one character and loads."""
    row, id_key, _, _ = VALID[fmt]
    paired = {**record(fmt, "a"), id_key: "smile \ud83d\ude00"}
    path = write_lines(tmp_path / "t.jsonl", [paired, {**record(fmt, "b"), id_key: LONE}])
    assert "lone UTF-16 surrogate" in str(located(fmt, path, 2, id_key))
    if fmt == "lumos":  # nested: the field's path inside the record
        nested = record("lumos", "b")
        nested["messages"][1]["content"] = LONE
        located(fmt, write_lines(tmp_path / "n.jsonl", [record(fmt, "a"), nested]), 2, "messages[1].content")
    assert main(["load", "--format", fmt, str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and f"{path}:2: {id_key}: holds a lone UTF-16 surrogate" in err
    (task,) = load(fmt, write_lines(tmp_path / "ok.jsonl", [paired]))
    assert task.id == "smile \U0001F600"


def test_a_lone_surrogate_in_an_array_document_names_its_record(tmp_path):
    rows = [record("svamp", "a"), {**record("svamp", "b"), "Body": LONE}]
    path = write_array(tmp_path / "s.json", svamp_array(rows))
    assert "lone UTF-16 surrogate" in str(array_located(path, 8, 2, "Body"))


def test_a_run_whose_tasks_hold_a_lone_surrogate_writes_nothing(tmp_path):
    from engine.config import load_config

    path = write_lines(tmp_path / "t.jsonl", [record("tasks", "a"), {**record("tasks", "b"), "question": LONE}])
    config = load_config(None, [f"data.tasks={path}", f"run.workdir={tmp_path / 'runs'}"])
    assert_create_run_writes_nothing(tmp_path, config, r"t.jsonl:2: question: holds a lone UTF-16 surrogate")


@pytest.mark.parametrize("fmt", ["tasks", "lumos"])
def test_a_json_array_document_given_to_a_json_lines_format_says_so(tmp_path, fmt):
    """A pretty-printed array read as JSON lines failed on its first line as "the line ends before the record does
    (is it cut short?)", which sent the user looking for a truncated file; an array on one line said only "expected a
    JSON object, got list". Both now say the file is an array document, and which formats read one."""
    rows = [record(fmt, "a"), record(fmt, "b")]
    pretty = write_array(tmp_path / "pretty.json", json.dumps(rows, indent=2))
    err = str(located(fmt, pretty, 1, "<json>"))
    assert "the file opens with '[' at column 1: a JSON array document" in err and "cut short" not in err
    one_line = write_array(tmp_path / "one.json", json.dumps(rows))
    assert "got list: a JSON array document, and this format reads JSON lines" in str(
        located(fmt, one_line, 1, "<record>"))
    later = write_lines(tmp_path / "later.jsonl", [record(fmt, "a"), [1, 2]])  # one bad record, not an array file
    assert str(located(fmt, later, 2, "<record>")).endswith("expected a JSON object, got list")


BENCHMARKS = ["gsm8k", "svamp", "hotpotqa", "strategyqa"]


@pytest.mark.parametrize("fmt", BENCHMARKS)
def test_every_benchmark_format_reads_a_json_array_on_one_line_or_many(tmp_path, fmt):
    """Lumos ships its HotpotQA and StrategyQA eval sets as one-line JSON arrays; they were refused ("only svamp reads
    an array"). Every benchmark loader now reads an array as it reads JSON lines, errors naming line and record."""
    rows = [record(fmt, "a"), record(fmt, "b")]
    from_lines = [t.to_dict() for t in load(fmt, write_lines(tmp_path / "t.jsonl", rows))]
    for name, text in (("one.json", json.dumps(rows)), ("pretty.json", json.dumps(rows, indent=2))):
        assert [t.to_dict() for t in load(fmt, write_array(tmp_path / name, text))] == from_lines
    _, _, field, bad_value = VALID[fmt]
    bad = write_array(tmp_path / "bad.json", json.dumps([*rows, {**record(fmt, "c"), field: bad_value}]))
    with pytest.raises(DataError) as info:
        list(load(fmt, bad))
    assert (info.value.line, info.value.line.record, info.value.field) == (1, 3, field)
    assert str(info.value).startswith(f"{bad}:1 (record 3): {field}: ")


@pytest.mark.parametrize(("fmt", "name", "first"), [
    ("hotpotqa", "hotpotqa_lumos_eval_array.json", ("Were Scott Derrickson and Ed Wood of the same nationality?",
                                                    "yes")),
    ("strategyqa", "strategyqa_lumos_eval_array.json", ("Is it common to see frost during some college "
                                                        "commencements?", "yes")),
])
def test_lumos_eval_arrays_load_as_shipped(samples_dir, fmt, name, first):
    tasks = list(load(fmt, samples_dir / name))
    assert len(tasks) == 3 and (tasks[0].question, tasks[0].answer) == first
    assert [t.id for t in tasks] == [f"{fmt}-{n}" for n in (1, 2, 3)] and {t.domain for t in tasks} == {"qa"}
