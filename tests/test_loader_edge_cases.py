"""Loader edge cases a review found: Lumos questions holding the grounder's separator, the planner's stop sentence
with text after it, HotpotQA titles holding ": ", and StrategyQA's BIG-bench task file as Lumos ships it
(a pretty-printed JSON document, ``tests/data/samples/strategyqa_bigbench_document.json``; tests/data/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import DataError
from engine.formats import load
from engine.formats.hotpotqa import passage_text, split_passage
from engine.formats.lumos import load_lumos, parse_planner_turn
from engine.prompts import STOP_PLANNING, grounder_messages, planner_messages
from engine.tasks import Task
from engine.tools.qa import Corpus, knowledge_query

BIGBENCH_DOCUMENT = Path(__file__).parent / "data" / "samples" / "strategyqa_bigbench_document.json"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def load_error(fmt: str, path: Path, **kwargs) -> DataError:
    with pytest.raises(DataError) as info:
        list(load(fmt, path, **kwargs))
    return info.value


# --- Lumos: any question round-trips through the engine's own rendering -------------------------------------------

QUESTIONS = (
    # MATH-style problems put " \n" inside the question: the grounder split there, refusing the record.
    "Let $f(x) = 2x + 3$. \nWhat is $f(4)$?",
    # A question quoting the grounder's own markers (without the subgoal that really follows them).
    "What comes after ' \nSubgoal to be grounded: ' in a Lumos prompt?",
    "What comes after ' \nSubgoals to be grounded: ' in a Lumos prompt?",
)


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("formulation", ["onetime", "iterative"])
@pytest.mark.parametrize("dataset", ["maths", "complex_qa"])
def test_lumos_question_with_the_separator_round_trips(samples_dir, tmp_path, dataset, formulation, question):
    """A real sample task given a hostile question: planner_messages/grounder_messages -> load_lumos gives it back."""
    plan = samples_dir / f"lumos_derived_{dataset}_plan_{formulation}.jsonl"
    ground = samples_dir / f"lumos_derived_{dataset}_ground_{formulation}.jsonl"
    original = next(iter(load_lumos(plan, ground)))
    task = Task(**{**original.__dict__, "question": question})
    record = {"dataset": dataset, "id": task.id}
    plan_rows = [{**record, "messages": planner_messages(task, task.gold_subgoals, formulation,
                                                         task.meta.get("executed_results"))}]
    ground_rows = [{**record, "messages": grounder_messages(task, task.gold_subgoals, task.gold_actions, formulation,
                                                            task.meta.get("grounding_results"))}]
    (back,) = load("lumos", write_jsonl(tmp_path / "plan.jsonl", plan_rows),
                   ground=write_jsonl(tmp_path / "ground.jsonl", ground_rows))
    assert back.question == question
    assert (back.gold_subgoals, back.gold_actions, back.meta) == (task.gold_subgoals, task.gold_actions, task.meta)
    (planner_only,) = load("lumos", tmp_path / "plan.jsonl")
    assert planner_only.question == question


# --- Lumos: "Yes, I will stop planning." is the whole turn ----------------------------------------------------------


def test_stop_sentence_with_text_after_it_is_refused(samples_dir, tmp_path):
    assert parse_planner_turn(STOP_PLANNING + " \n") is None  # trailing whitespace is no content
    with pytest.raises(ValueError, match="expected nothing after"):
        parse_planner_turn(STOP_PLANNING + " Subgoal 3: Add the two.")
    rows = [json.loads(x) for x in (samples_dir / "lumos_derived_maths_plan_iterative.jsonl").read_text().splitlines()]
    last = len(rows[1]["messages"]) - 1
    assert rows[1]["messages"][last]["content"] == STOP_PLANNING
    rows[1]["messages"][last]["content"] = STOP_PLANNING + " Subgoal 9: Check the answer."  # would be dropped unseen
    path = write_jsonl(tmp_path / "plan.jsonl", rows)
    err = load_error("lumos", path)
    assert (err.path, err.line, err.field) == (str(path), 2, f"messages[{last}].content")
    assert "Subgoal 9" in err.message


# --- HotpotQA: a title holding ": " stays one page -----------------------------------------------------------------

STAR_WARS = {  # constructed: the shared HotpotQA sample (the "simplified" dev file) carries no context
    "_id": "sw1",
    "question": "In what year was the first Star Wars film released?",
    "answer": "1977",
    "context": [
        ["Star Wars", ["Star Wars is an American epic space opera media franchise.", "George Lucas created it."]],
        ["Star Wars: Episode IV – A New Hope", ["Star Wars is a 1977 American epic space opera film."]],
    ],
}


def test_hotpotqa_title_with_colon_space_survives(tmp_path):
    (task,) = load("hotpotqa", write_jsonl(tmp_path / "h.jsonl", [STAR_WARS]))
    corpus = Corpus.from_context(task.context)
    assert [p.title for p in corpus.passages] == ["Star Wars", "Star Wars: Episode IV – A New Hope"]
    franchise = knowledge_query("Star Wars", {}, corpus).values[0].items
    assert [p.title for p in franchise] == ["Star Wars"]  # was both pages: the film's title was cut to "Star Wars"
    film = knowledge_query("Star Wars: Episode IV – A New Hope", {}, corpus).values[0].items
    assert [p.text for p in film] == ["Star Wars is a 1977 American epic space opera film."]


def test_hotpotqa_passage_layout_stays_readable_both_ways(tmp_path):
    # A title the plain layout reads right is written as before, and contexts already written read as before.
    assert passage_text("Ed Wood", "He was American.") == "Ed Wood: He was American."
    assert split_passage("Depression (mood): It is: low mood.") == ("Depression (mood)", "It is: low mood.")
    assert split_passage("A sentence with no title") is None
    assert split_passage("x" * 121 + ": a long sentence, not a title") is None
    for title in ("Star Wars: Episode IV – A New Hope", "[bracketed]", "T" * 200):
        assert split_passage(passage_text(title, "Text: more.")) == (title, "Text: more.")
    # A title no layout keeps whole is refused, naming it, rather than cut.
    bad = {**STAR_WARS, "context": [["Odd]: title", ["Text."]]]}
    err = load_error("hotpotqa", write_jsonl(tmp_path / "bad.jsonl", [bad]))
    assert (err.line, err.field) == (1, "context[0][0]")


# --- StrategyQA: the BIG-bench task file as Lumos ships it -----------------------------------------------------------


def bigbench_document() -> str:
    if not BIGBENCH_DOCUMENT.is_file():
        pytest.fail(f"test data missing: {BIGBENCH_DOCUMENT} (see tests/data/SOURCES.md)", pytrace=False)
    return BIGBENCH_DOCUMENT.read_text(encoding="utf-8")


def test_strategyqa_bigbench_document_loads(samples_dir):
    tasks = list(load("strategyqa", BIGBENCH_DOCUMENT))  # was "1: <json>: invalid JSON at column 119 ... cut short?"
    lines = [json.loads(x) for x in (samples_dir / "strategyqa_bigbench.jsonl").read_text().splitlines()[:3]]
    assert [t.id for t in tasks] == ["strategyqa-1", "strategyqa-2", "strategyqa-3"]
    assert [t.question for t in tasks] == [row["input"] for row in lines]  # the same upstream examples
    assert [t.answer for t in tasks] == ["yes", "no", "no"]
    assert tasks[0].meta["explanation"] == lines[0]["target"]
    assert "canary" not in tasks[0].meta


def test_strategyqa_bad_example_in_a_document_is_located(tmp_path):
    text = bigbench_document().replace('"Yes": 0,\n            "No": 1', '"Yes": 1,\n            "No": 1', 1)
    path = tmp_path / "strategy_qa.json"
    path.write_text(text, encoding="utf-8")
    err = load_error("strategyqa", path)
    assert (err.line, err.line.record, err.field) == (27, 2, "target_scores")  # example 2 opens on line 27


@pytest.mark.parametrize("keep", [400, 1500, -5])
def test_strategyqa_document_cut_short_says_so_at_its_end(tmp_path, keep):
    text = bigbench_document()[:keep]  # inside the metadata, inside an example's string, before the closing "]}"
    path = tmp_path / "cut.json"
    path.write_text(text, encoding="utf-8")
    err = load_error("strategyqa", path)
    assert (err.line, err.field) == (len(text.rstrip().splitlines()), "<json>")
    assert "the file ends before the JSON document that opens on line 1 does (is it cut short?)" in err.message


def test_strategyqa_documents_it_does_not_read_say_so(tmp_path):
    pretty_record = tmp_path / "one.json"
    pretty_record.write_text(json.dumps({"question": "Q?", "answer": True}, indent=2), encoding="utf-8")
    err = load_error("strategyqa", pretty_record)
    assert (err.line, err.field) == (1, "examples")
    assert "this layout is not supported" in err.message and "cut short" not in err.message
    broken = tmp_path / "broken.json"
    broken.write_text(bigbench_document().replace('"target_scores": {', '"target_scores" {', 1), encoding="utf-8")
    err = load_error("strategyqa", broken)
    assert err.line == 21 and "Expecting ':' delimiter" in err.message and "cut short" not in err.message


def test_strategyqa_json_lines_cut_short_still_say_so(tmp_path):
    whole = json.dumps({"question": "Q?", "answer": True})
    for text, line in ((whole[:-5] + "\n" + whole + "\n", 1), (whole[:-5] + "\n", 1), (whole + "\n" + whole[:9], 2)):
        path = tmp_path / "cut.jsonl"
        path.write_text(text, encoding="utf-8")
        err = load_error("strategyqa", path)
        assert (err.line, err.field) == (line, "<json>") and "cut short" in err.message
