"""Offline QA tools: corpus loading, KnowledgeQuery, ParagraphRetrieve, QA with a model and the extractive fallback."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engine.errors import DataError
from engine.tools.maths import ToolError, value_to_text
from engine.tools.qa import (
    EXTRACTIVE_NOTE,
    Corpus,
    OpenAIQA,
    Passages,
    extractive_answer,
    knowledge_query,
    paragraph_retrieve,
    qa,
)

CONTEXT = [
    "Julius Caesar: Julius Caesar was a Roman general and statesman. Caesar had 3 children.",
    "Genghis Khan: Genghis Khan was the founder of the Mongol Empire. He had 16 children.",
    "Depression (mood): Depression is a state of low mood. It is linked to low levels of serotonin.",
]


@pytest.fixture()
def corpus() -> Corpus:
    return Corpus.from_context(CONTEXT)


def test_corpus_from_context_and_jsonl(tmp_path, corpus):
    assert corpus.passages[0].title == "Julius Caesar"
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        json.dumps({"title": "A", "text": "alpha"}) + "\n\n" + json.dumps({"title": "B", "text": "b"}) + "\n"
    )
    assert [p.title for p in Corpus.from_jsonl(path).passages] == ["A", "B"]


@pytest.mark.parametrize(
    "content, field",
    [
        ('{"title": "A"}\n', "text"),
        ("[1]\n", "<record>"),
        ('{"title": 1, "text": "x"}\n', "title"),
        ("{oops\n", "<json>"),
    ],
)
def test_corpus_jsonl_errors_are_located(tmp_path, content, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"title": "ok", "text": "fine"}\n' + content)
    with pytest.raises(DataError) as info:
        Corpus.from_jsonl(path)
    assert info.value.line == 2 and info.value.field == field


def test_knowledge_query_title_then_bm25(corpus):
    page = knowledge_query("Julius Caesar", {}, corpus).values[0]
    assert isinstance(page, Passages) and page.items[0].title == "Julius Caesar"
    assert knowledge_query("depression", {}, corpus).values[0].items[0].title == "Depression (mood)"
    assert knowledge_query("Mongol Empire founder", {}, corpus).values[0].items[0].title == "Genghis Khan"
    with pytest.raises(ToolError, match="no corpus"):
        knowledge_query("x", {}, None)


def test_paragraph_retrieve_ranks_sentences(corpus):
    env = {"R1": knowledge_query("Julius Caesar", {}, corpus).values[0]}
    best = paragraph_retrieve("R1, Query: How many children did Julius Caesar have?", env).values[0]
    assert "3 children" in value_to_text(best).split("\n")[0]
    with pytest.raises(ToolError, match="undefined variable R7"):
        paragraph_retrieve("R7, Query: anything", env)


def test_qa_extractive_fallback(corpus):
    env = {"R2": Passages(tuple(corpus.passages[:1]))}
    result = qa("[R2], Question: How many children did Julius Caesar have?", env, None)
    assert result.values == ("3",) and result.note == EXTRACTIVE_NOTE


def test_qa_uses_model_when_given():
    class Model:
        def answer(self, context: str, question: str) -> str:
            self.seen = (context, question)
            return " sixteen "

    model = Model()
    result = qa("[R3, R6], Question: Who had more, with commas?", {"R3": "3", "R6": "16"}, model)
    assert result.values == ("sixteen",) and result.note is None
    assert model.seen == ("3\n16", "Who had more, with commas?")


def test_extractive_answer_forms():
    text = "The city had a population of 75,000 in 2010. The mayor of the city is Jane Doe."
    assert extractive_answer(text, "What is the population of the city?") == "75000"
    assert extractive_answer(text, "Who is the mayor of the city?") == "Jane Doe"
    assert extractive_answer(text, "Is Jane Doe the mayor?") == "yes"


def test_openai_adapter_with_fake_client():
    calls = []

    def create(**kwargs):
        calls.append(kwargs)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=" Paris "))])

    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    assert OpenAIQA("tiny", client=client).answer("France: capital Paris.", "Capital of France?") == "Paris"
    assert calls[0]["model"] == "tiny" and "Capital of France?" in calls[0]["messages"][0]["content"]
