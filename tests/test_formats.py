"""Dataset loaders on the carried real-data samples (tests/data/samples), malformed inputs, and the ``load`` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.errors import DataError
from engine.formats import FORMATS, load
from engine.formats.lumos import load_lumos, parse_planner_turn, parse_subgoals

LUMOS_COUNTS = {"maths": 10, "complex_qa": 5, "web_agent": 2}
# The carried eval and train samples are the first rows of the upstream files (tests/data/SOURCES.md); these counts
# pin that every kept row loads, nothing more.
EVAL_ROWS, TRAIN_ROWS = 20, 10


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def lumos_pair(samples: Path, dataset: str, formulation: str) -> tuple[Path, Path]:
    return (
        samples / f"lumos_derived_{dataset}_plan_{formulation}.jsonl",
        samples / f"lumos_derived_{dataset}_ground_{formulation}.jsonl",
    )


# --- real samples -------------------------------------------------------------------------------------------------


def test_gsm8k_samples(samples_dir):
    tasks = list(load("gsm8k", samples_dir / "gsm8k_test.jsonl"))
    assert len(tasks) == EVAL_ROWS
    first = tasks[0]
    expected = ("gsm8k-1", "maths", "gsm8k", "held_in", "18")
    assert (first.id, first.domain, first.source, first.split, first.answer) == expected
    assert first.question.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.meta["solution"].endswith("$<<9*2=18>>18 every day at the farmer\u2019s market.")
    assert len(list(load("gsm8k", samples_dir / "gsm8k_train.jsonl", split="train"))) == TRAIN_ROWS
    # GSM8K answers with thousands separators lose the commas.
    assert all("," not in t.answer for t in tasks)


def test_svamp_samples(samples_dir):
    tasks = list(load("svamp", samples_dir / "svamp.jsonl"))
    assert len(tasks) == EVAL_ROWS
    first = tasks[0]
    assert first.id == "chal-1"
    assert first.question == (
        "Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on each pack "
        "How much do you have to pay to buy each pack?"
    )
    assert first.answer == "51"
    assert first.meta == {"equation": "( 76.0 - 25.0 )", "type": "Subtraction"}
    assert all(not t.answer.endswith(".0") for t in tasks)


def test_hotpotqa_samples(samples_dir):
    tasks = list(load("hotpotqa", samples_dir / "hotpotqa_dev_simplified.jsonl"))
    assert len(tasks) == EVAL_ROWS
    first = tasks[0]
    assert (first.id, first.domain, first.answer) == ("hotpotqa-1", "qa", "yes")
    assert first.question == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert first.meta == {"type": "comparison"}
    assert sum(t.meta["type"] == "bridge" for t in tasks) == 14  # the other 6 kept rows are comparisons


def test_hotpotqa_official_context(tmp_path):
    row = {
        "_id": "5a8b57f2",
        "question": "Q?",
        "answer": "A",
        "level": "hard",
        "context": [["Ed Wood", ["Edward Wood was a filmmaker.", " He was American."]]],
    }
    (task,) = load("hotpotqa", write_jsonl(tmp_path / "h.jsonl", [row]))
    assert task.id == "5a8b57f2"
    assert task.context == ["Ed Wood: Edward Wood was a filmmaker. He was American."]
    assert task.meta == {"level": "hard"}


def test_strategyqa_samples(samples_dir):
    evals = list(load("strategyqa", samples_dir / "strategyqa_lumos_eval.jsonl"))
    assert len(evals) == EVAL_ROWS
    assert (evals[0].id, evals[0].answer, evals[1].answer) == ("strategyqa-1", "yes", "no")
    full = list(load("strategyqa", samples_dir / "strategyqa_train_full.jsonl"))
    assert len(full) == TRAIN_ROWS
    assert full[0].id == "2bc9c4f9c19c167187f2"
    assert full[0].question == "Are more people today related to Genghis Khan than Julius Caesar?"
    assert full[0].meta["decomposition"][0] == "How many kids did Julius Caesar have?"
    assert len(full[0].meta["facts"]) == 3
    bigbench = list(load("strategyqa", samples_dir / "strategyqa_bigbench.jsonl"))
    assert len(bigbench) == TRAIN_ROWS
    assert [t.answer for t in bigbench[:2]] == ["yes", "no"]
    assert bigbench[0].question == evals[0].question
    assert bigbench[0].meta["explanation"].startswith("Yes. College commencement")


@pytest.mark.parametrize("formulation", ["onetime", "iterative"])
@pytest.mark.parametrize("dataset", sorted(LUMOS_COUNTS))
def test_lumos_samples_join(samples_dir, dataset, formulation):
    plan, ground = lumos_pair(samples_dir, dataset, formulation)
    tasks = list(load("lumos", plan, ground=ground))
    assert len(tasks) == LUMOS_COUNTS[dataset]
    assert {t.domain for t in tasks} == {{"maths": "maths", "complex_qa": "qa", "web_agent": "web"}[dataset]}
    for t in tasks:
        assert t.split == "train" and t.source == f"lumos:{dataset}"
        assert t.meta["formulation"] == formulation and t.meta["dataset"] == dataset
        assert t.gold_subgoals and not t.gold_subgoals[0].startswith("Subgoal")
        if formulation == "iterative":
            assert len(t.gold_actions) == len(t.gold_subgoals) == len(t.meta["executed_results"])
        else:
            assert len(t.gold_actions) == 1


@pytest.mark.parametrize(("plan_formulation", "ground_formulation"), [("iterative", "onetime"),
                                                                      ("onetime", "iterative")])
def test_lumos_files_of_two_formulations_are_refused_at_the_join(samples_dir, plan_formulation, ground_formulation):
    """An iterative planner file joined with a onetime grounder file loaded, and the run then failed in its sample
    stage ("iterative planning needs the executed result of subgoal 2") naming no file; the other way round it ran on
    with a caution naming the wrong file. The join refuses both, at the grounder file's line."""
    plan, _ = lumos_pair(samples_dir, "maths", plan_formulation)
    _, ground = lumos_pair(samples_dir, "maths", ground_formulation)
    with pytest.raises(DataError) as info:
        list(load("lumos", plan, ground=ground))
    assert (info.value.path, info.value.line, info.value.field) == (str(ground), 1, "messages")
    article = {"onetime": "a onetime", "iterative": "an iterative"}
    assert (f"{article[ground_formulation]} grounder record joined with {article[plan_formulation]} planner record; "
            "join files of one formulation") in str(info.value)


def test_lumos_maths_first_record(samples_dir):
    it = next(iter(load_lumos(*lumos_pair(samples_dir, "maths", "iterative"))))
    one = next(iter(load_lumos(*lumos_pair(samples_dir, "maths", "onetime"))))
    assert it.id == one.id == "maths_0"
    assert (
        it.question
        == one.question
        == (
            "The first four terms in an arithmetic sequence are $x+y$, $x-y$, $xy$, and $x/y$, in that order. "
            "What is the fifth term? Express your answer as a common fraction."
        )
    )
    assert it.gold_subgoals == one.gold_subgoals
    assert it.gold_subgoals[0] == "Calculate the difference between two consecutive terms in the sequence."
    assert len(it.gold_subgoals) == 4
    assert it.gold_actions[1] == (
        "R2 = Calculator((x+y) + 2*R1); R3 = Calculator((x+y) + 3*R1); R4 = Calculator((x+y) + 4*R1)"
    )
    assert it.meta["executed_results"] == ["-2y", "x-7y", "-9/8, -3/5", "123/40"]
    assert one.gold_actions[0].endswith("R5, R6 = SolveEquation(R2=xy, R3=x/y); Output = Calculator(R4(R5, R6))")
    assert one.actions_text == one.gold_actions[0]


def test_lumos_qa_grounding_results(samples_dir):
    task = next(iter(load_lumos(*lumos_pair(samples_dir, "complex_qa", "iterative"))))
    assert task.meta["executed_results"] == ["3", "16", "True"]
    assert task.meta["grounding_results"] == ["3.", "16."]


def test_lumos_single_file_either_kind(samples_dir):
    plan, ground = lumos_pair(samples_dir, "web_agent", "iterative")
    plans, grounds = list(load_lumos(plan)), list(load_lumos(ground))
    assert [t.gold_subgoals for t in plans] == [t.gold_subgoals for t in grounds]
    assert plans[0].gold_actions == [] and len(grounds[0].gold_actions) == 11
    assert plans[0].meta["executed_results"][0] == "enter the site for flight + cruise"


def test_parse_subgoals():
    assert parse_subgoals("Subgoal 1: a.; Subgoal 2: b.") == ["a.", "b."]
    # A ";" inside a subgoal, or a "; Subgoal k:" with the wrong k, is not a boundary.
    assert parse_subgoals("Subgoal 1: x; y; Subgoal 3: z; Subgoal 2: w.") == ["x; y; Subgoal 3: z", "w."]
    assert parse_subgoals("Subgoal 1: ends with a space. ") == ["ends with a space. "]
    for bad in ("Step 1: a", "Subgoal 1: ; Subgoal 2: b"):
        with pytest.raises(ValueError):
            parse_subgoals(bad)
    assert parse_planner_turn("No, I will keep planning. Subgoal 3: c.") == (3, "c.")
    assert parse_planner_turn("Yes, I will stop planning.") is None


def test_tasks_format_round_trip(tmp_path, samples_dir):
    from engine.tasks import write_tasks

    path = tmp_path / "t.jsonl"
    write_tasks(load("svamp", samples_dir / "svamp.jsonl"), path)
    assert [t.id for t in load("tasks", path)][:2] == ["chal-1", "chal-2"]


# --- malformed inputs ---------------------------------------------------------------------------------------------


def assert_located(exc: pytest.ExceptionInfo, path: Path, line: int, field: str) -> None:
    assert str(exc.value).startswith(f"{path}:{line}: {field}:"), str(exc.value)


GOOD_GSM = {"question": "q?", "answer": "x\n#### 1,234"}
BAD_FEEDBACK = "The executed result for Subgoal 9 is 3. Stop?"


def test_bad_json_line_3(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [GOOD_GSM, GOOD_GSM, "{not json"])
    loader = load("gsm8k", path)
    with pytest.raises(DataError) as exc:
        list(loader)
    assert_located(exc, path, 3, "<json>")


@pytest.mark.parametrize(
    ("fmt", "row", "field"),
    [
        ("gsm8k", {"question": "q?"}, "answer"),
        ("gsm8k", {"question": "q?", "answer": "no final line"}, "answer"),
        ("gsm8k", {"question": 7, "answer": "#### 1"}, "question"),
        ("gsm8k", {"question": "q?", "answer": "x\n#### abc"}, "answer"),  # no answer could ever match it
        ("gsm8k", {"question": "q?", "answer": "x\n#### 1e400"}, "answer"),
        ("svamp", {"ID": "s", "Body": "b", "Question": "q", "Answer": "51"}, "Answer"),
        ("svamp", {"ID": "s", "Body": "b", "Answer": 1.0}, "Question"),
        ("hotpotqa", {"question": "q", "answer": "a", "context": [["t", "not a list"]]}, "context[0]"),
        ("strategyqa", {"question": "q", "answer": "yes"}, "answer"),
        ("strategyqa", {"input": "q", "target_scores": {"Yes": 1, "No": 1}}, "target_scores"),
        ("strategyqa", {"qid": ["x"], "question": "q", "answer": True}, "qid"),
    ],
)
def test_malformed_record(tmp_path, fmt, row, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(DataError) as exc:
        list(load(fmt, path))
    assert_located(exc, path, 1, field)


def test_gsm8k_final_answers_may_carry_a_sign_and_decimals(tmp_path):
    rows = [{"question": "q?", "answer": f"x\n#### {final}"} for final in ("-3", "+4", "2.50", ".5", "1,000.25")]
    assert [t.answer for t in load("gsm8k", write_jsonl(tmp_path / "g.jsonl", rows))] == [
        "-3", "+4", "2.50", ".5", "1000.25"]


def test_gsm8k_commas_and_duplicate_id(tmp_path):
    (task,) = load("gsm8k", write_jsonl(tmp_path / "g.jsonl", [GOOD_GSM]))
    assert task.answer == "1234"
    path = write_jsonl(tmp_path / "d.jsonl", [{**GOOD_GSM, "id": "a"}, {**GOOD_GSM, "id": "a"}])
    with pytest.raises(DataError) as exc:
        list(load("gsm8k", path))
    assert_located(exc, path, 2, "id")


def lumos_rows(samples: Path, dataset: str, formulation: str) -> tuple[list[dict], list[dict]]:
    plan, ground = lumos_pair(samples, dataset, formulation)
    read = lambda p: [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    return read(plan), read(ground)


def test_lumos_planner_id_missing_from_grounder(tmp_path, samples_dir):
    plans, grounds = lumos_rows(samples_dir, "maths", "iterative")
    plan = write_jsonl(tmp_path / "plan.jsonl", plans)
    ground = write_jsonl(tmp_path / "ground.jsonl", grounds[:2] + grounds[3:])
    with pytest.raises(DataError) as exc:
        list(load_lumos(plan, ground))
    assert_located(exc, plan, 3, "id")
    assert "maths_2" in str(exc.value)
    # And the other way round: an id only the grounder file has.
    plan = write_jsonl(tmp_path / "plan.jsonl", plans[:-1])
    with pytest.raises(DataError) as exc:
        list(load_lumos(plan, write_jsonl(tmp_path / "ground.jsonl", grounds)))
    assert_located(exc, tmp_path / "ground.jsonl", 10, "id")


def test_lumos_error_before_any_task(tmp_path, samples_dir):
    plans, grounds = lumos_rows(samples_dir, "maths", "onetime")
    grounds[5]["messages"][0]["content"] = grounds[5]["messages"][0]["content"].replace("Task: ", "Task: X", 1)
    tasks = load_lumos(write_jsonl(tmp_path / "p.jsonl", plans), write_jsonl(tmp_path / "g.jsonl", grounds))
    with pytest.raises(DataError) as exc:
        next(iter(tasks))  # the mismatch on line 6 fails the very first next(): no partial dataset
    assert_located(exc, tmp_path / "g.jsonl", 6, "messages[0].content")


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("id"), "id"),
        (lambda r: r.update(dataset="alfworld"), "dataset"),
        (lambda r: r["messages"][2].update(content=BAD_FEEDBACK), "messages[2].content"),
        (lambda r: r["messages"][3].update(role="user"), "messages[3].role"),
        (lambda r: r["messages"][1].update(content=5), "messages[1].content"),
        (lambda r: r["messages"].pop(), "messages[6].role"),
        (lambda r: r["messages"][0].update(content="Hello"), "messages[0].content"),
    ],
)
def test_lumos_malformed_planner(tmp_path, samples_dir, mutate, field):
    plans, _ = lumos_rows(samples_dir, "complex_qa", "iterative")
    mutate(plans[1])
    path = write_jsonl(tmp_path / "p.jsonl", plans)
    with pytest.raises(DataError) as exc:
        list(load_lumos(path))
    assert_located(exc, path, 2, field)


def test_lumos_malformed_grounder(tmp_path, samples_dir):
    _, grounds = lumos_rows(samples_dir, "complex_qa", "iterative")
    grounds[0]["messages"][2]["content"] = "Subgoal to be grounded: Subgoal 2: no results listed.\n"
    path = write_jsonl(tmp_path / "g.jsonl", grounds)
    with pytest.raises(DataError) as exc:
        list(load_lumos(path))
    assert_located(exc, path, 1, "messages[2].content")


# --- CLI ----------------------------------------------------------------------------------------------------------


def test_cli_load_json(samples_dir, capsys):
    plan, ground = lumos_pair(samples_dir, "complex_qa", "onetime")
    assert main(["load", "--format", "lumos", str(plan), "--ground", str(ground), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "lumos" and out["count"] == 5 and out["domains"] == {"qa": 5}
    assert out["first"]["id"] == "complex_qa_0" and out["path"] == str(plan)
    assert out["splits"] == {"train": 5} and out["with_gold_actions"] == 5
    # without --ground a lumos planner file has no gold actions: the one-line summary says so
    assert main(["load", "--format", "lumos", str(plan)]) == 0
    assert capsys.readouterr().out.endswith("5 tasks (qa=5; split train=5; 0 with gold actions)\n")


def test_cli_load_split_and_text(samples_dir, capsys):
    assert main(["load", "--format", "svamp", str(samples_dir / "svamp.jsonl"), "--split", "held_out", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first"]["split"] == "held_out" and out["domains"] == {"maths": EVAL_ROWS}
    assert main(["load", "--format", "hotpotqa", str(samples_dir / "hotpotqa_dev_simplified.jsonl")]) == 0
    assert f"{EVAL_ROWS} tasks (qa={EVAL_ROWS}; split " in capsys.readouterr().out


def test_a_gsm8k_file_loaded_as_hotpotqa_is_refused_naming_its_format(samples_dir):
    """Both formats have a question and an answer: a GSM8K file loaded as HotpotQA gave "QA" tasks whose answers were
    whole worked solutions."""
    with pytest.raises(DataError, match=r"gsm8k_test\.jsonl:1: answer: .*'#### <number>'.*--format gsm8k"):
        list(load("hotpotqa", samples_dir / "gsm8k_test.jsonl"))


def test_cli_load_bad_input_exits_2(tmp_path, capsys):
    path = write_jsonl(tmp_path / "g.jsonl", [GOOD_GSM, {"question": "q", "answer": "no hashes"}])
    assert main(["load", "--format", "gsm8k", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {path}:2: answer:")
    assert main(["load", "--format", "gsm8k", str(path), "--ground", str(path)]) == 2


def test_formats_tuple():
    assert FORMATS == ("gsm8k", "svamp", "hotpotqa", "strategyqa", "lumos", "tasks")


# The first three records of SVAMP's own SVAMP.json (arkilpatel/SVAMP; the same rows as the carried svamp.jsonl,
# which repacks that array as JSON lines), written below as the upstream file is: one indented JSON array.
SVAMP_RECORDS = [
    {"ID": "chal-1", "Body": "Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on each pack",
     "Question": "How much do you have to pay to buy each pack?", "Equation": "( 76.0 - 25.0 )", "Answer": 51.0,
     "Type": "Subtraction"},
    {"ID": "chal-2", "Body": "Dan had $ 3 left with him after he bought a candy bar. If he had $ 4 at the start",
     "Question": "How much did the candy bar cost?", "Equation": "( 4.0 - 3.0 )", "Answer": 1.0,
     "Type": "Subtraction"},
    {"ID": "chal-3", "Body": "Paco had 26 salty cookies and 17 sweet cookies. He ate 14 sweet cookies and 9 salty "
     "cookies.", "Question": "How many salty cookies did Paco have left?", "Equation": "( 26.0 - 9.0 )",
     "Answer": 17.0, "Type": "Subtraction"},
]


def test_svamp_json_array_as_distributed(tmp_path, capsys):
    """SVAMP ships one JSON array (SVAMP.json): it loads to the same tasks as the JSON lines of the same records."""
    array = tmp_path / "SVAMP.json"
    array.write_text(json.dumps(SVAMP_RECORDS, indent=4), encoding="utf-8")
    lines = write_jsonl(tmp_path / "svamp.jsonl", SVAMP_RECORDS)
    tasks = list(load("svamp", array))
    assert [t.to_dict() for t in tasks] == [t.to_dict() for t in load("svamp", lines)]
    assert [(t.id, t.answer) for t in tasks] == [("chal-1", "51"), ("chal-2", "1"), ("chal-3", "17")]
    assert tasks[0].meta == {"equation": "( 76.0 - 25.0 )", "type": "Subtraction"}
    # minified, after a UTF-8 BOM and blank lines, without IDs: ids count records, as svamp-<line> counts lines
    bare = tmp_path / "bare.json"
    bare.write_bytes(b"\xef\xbb\xbf\n \n" + json.dumps([{k: v for k, v in r.items() if k != "ID"}
                                                        for r in SVAMP_RECORDS]).encode())
    assert [t.id for t in load("svamp", bare)] == ["svamp-1", "svamp-2", "svamp-3"]
    assert main(["load", "--format", "svamp", str(array), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 3 and out["first"]["id"] == "chal-1" and out["domains"] == {"maths": 3}


@pytest.mark.parametrize(("sample", "given", "named"), [
    ("gsm8k_test.jsonl", "svamp", "gsm8k"), ("gsm8k_test.jsonl", "lumos", "gsm8k"),
    ("gsm8k_test.jsonl", "tasks", "gsm8k"), ("gsm8k_test.jsonl", "strategyqa", "gsm8k"),
    ("svamp.jsonl", "gsm8k", "svamp"), ("lumos_derived_maths_plan_onetime.jsonl", "gsm8k", "lumos"),
    ("hotpotqa_dev_simplified.jsonl", "gsm8k", "hotpotqa"), ("strategyqa_train_full.jsonl", "hotpotqa", "strategyqa"),
])
def test_a_file_read_in_another_format_names_the_format_its_fields_are(samples_dir, sample, given, named):
    """A GSM8K file read as SVAMP said only "Body: missing required field": the first record's error now says whose
    fields it holds. Only on the first record, and only when they are another format's."""
    path = samples_dir / sample
    with pytest.raises(DataError) as info:
        list(load(given, path))
    assert info.value.line == 1 and f"are those of the {named} format: is this file {named}?" in str(info.value)


def test_a_files_own_format_error_gets_no_other_format_named(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"question": "q?", "answer": "x\n#### abc"}])
    with pytest.raises(DataError) as info:
        list(load("gsm8k", path))
    assert "is this file" not in str(info.value)
