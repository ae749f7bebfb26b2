"""Offline QA tools of the Lumos action language: KnowledgeQuery, ParagraphRetrieve and QA over a passage corpus.

Contract: a ``Corpus`` holds ``Passage(title, text)`` rows, built from a task's context list (``"title: text"``, or
``"[title]: text"`` for a title holding ": ", as the HotpotQA loader writes them and ``split_passage`` reads them) or
loaded from a JSONL file of ``{"title", "text"}`` (bad lines raise a located ``DataError``). ``KnowledgeQuery(query)``
returns the passages of the best-matching page (title match first, else BM25 over passages);
``ParagraphRetrieve(context, Query: q)`` ranks the paragraphs (or sentences) of a context with BM25 and keeps the top
ones; ``QA([contexts], Question: q)`` asks ``qa_model.answer(context, question)`` when a model is given, otherwise an
extractive fallback answers and the result carries ``note="extractive fallback"``.
Nothing here touches the network; ``OpenAIQA`` is a thin adapter for an OpenAI-compatible server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rank_bm25 import BM25Okapi

from engine.actions import keyword_args, split_args
from engine.errors import DataError
from engine.formats.hotpotqa import split_passage
from engine.tasks import read_jsonl
from engine.tools.base import ToolError, ToolResult
from engine.tools.math_values import value_to_text

EXTRACTIVE_NOTE = "extractive fallback"
TOP_PARAGRAPHS = 2
_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is are was were be been do does did what which who whom whose "
    "when where why how many much it its this that these those as has have had can could will would should".split()
)
_YES_NO = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b", re.IGNORECASE)
_NUMERIC_Q = re.compile(
    r"\b(how many|how much|how old|what year|which year|in what year|when|population|number of)\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\$?\d[\d,]*(?:\.\d+)?")


class QAModel(Protocol):
    def answer(self, context: str, question: str) -> str: ...


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    def __str__(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text


@dataclass(frozen=True)
class Passages:
    """A retrieval result: the value of ``KnowledgeQuery`` and ``ParagraphRetrieve`` steps."""

    items: tuple[Passage, ...]

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.items)


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in _STOPWORDS]


class Corpus:
    """Passages to retrieve from, with a BM25 index built once."""

    def __init__(self, passages: Sequence[Passage]):
        self.passages = list(passages)
        self._bm25 = BM25Okapi([tokens(str(p)) or ["_"] for p in self.passages]) if self.passages else None

    @classmethod
    def from_context(cls, context: Sequence[str]) -> Corpus:
        """A task's context strings; ``"title: text"`` or ``"[title]: text"`` gives a titled passage, other strings an
        untitled one. The rule is the HotpotQA loader's own (``split_passage``), so a title holding ": " comes back
        whole instead of cut at its first ": " (and merged with the page named by its first part)."""
        passages = []
        for item in context:
            titled = split_passage(item)
            passages.append(Passage(*titled) if titled else Passage("", item))
        return cls(passages)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Corpus:
        passages = []
        for line, row in read_jsonl(path):
            if not isinstance(row, dict):
                raise DataError(str(path), line, "<record>", "expected a JSON object with title and text")
            for name in ("title", "text"):
                if not isinstance(row.get(name), str):
                    raise DataError(str(path), line, name, "missing or not a string")
            passages.append(Passage(row["title"], row["text"]))
        return cls(passages)

    def page(self, query: str) -> list[Passage]:
        """All passages of the page whose title matches ``query``, else the best BM25 passage's page."""
        wanted = query.strip().lower()
        for match in (lambda t: t == wanted, lambda t: wanted in t or (t and t in wanted)):
            titles = [p.title for p in self.passages if match(p.title.lower())]
            if titles:
                return [p for p in self.passages if p.title == titles[0]]
        best = rank(self._bm25, self.passages, query, 1)
        if not best:
            return []
        title = best[0].title
        return [p for p in self.passages if p.title == title] if title else best


def rank(bm25: BM25Okapi | None, items: Sequence[Any], query: str, top: int) -> list[Any]:
    """Items with a positive score, best first; BM25 then token overlap (tiny corpora give BM25 zero idf)."""
    if not items or bm25 is None:
        return []
    query_tokens = tokens(query)
    scores = bm25.get_scores(query_tokens)
    wanted = set(query_tokens)
    keyed = [(scores[i], len(wanted & set(tokens(str(item)))), -i) for i, item in enumerate(items)]
    order = sorted(range(len(items)), key=lambda i: keyed[i], reverse=True)
    return [items[i] for i in order if keyed[i][0] > 0 or keyed[i][1] > 0][:top]


def _resolve(ref: str, env: Mapping[str, Any]) -> Any:
    ref = ref.strip()
    if ref in env:
        return env[ref]
    if re.fullmatch(r"R\d+", ref):
        raise ToolError(f"undefined variable {ref}")
    return ref  # literal text given as context


def interpolate(text: str, env: Mapping[str, Any]) -> str:
    """Replace references to earlier short answers inside free text ("Which country is R3 in?").

    Retrieved passages are left as references: pasting a page into a query would only add noise.
    """

    def value_of(match: re.Match[str]) -> str:
        value = env.get(match.group(0))
        if value is None or isinstance(value, Passages):
            return match.group(0)
        return value_to_text(value)

    return re.sub(r"\bR\d+\b", value_of, text)


def _paragraphs(value: Any) -> list[Passage]:
    """Split a context into paragraphs; a single paragraph is split into sentences."""
    items = list(value.items) if isinstance(value, Passages) else [Passage("", value_to_text(value))]
    parts = [Passage(p.title, para.strip()) for p in items for para in re.split(r"\n\s*\n", p.text) if para.strip()]
    if len(parts) == 1:
        only = parts[0]
        parts = [Passage(only.title, s) for s in sentences(only.text)] or parts
    return parts


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def knowledge_query(arg_text: str, env: Mapping[str, Any], corpus: Corpus | None) -> ToolResult:
    if corpus is None or not corpus.passages:
        raise ToolError("no corpus: give the task context or --context FILE")
    if not arg_text.strip():
        raise ToolError("KnowledgeQuery needs a query")
    query = interpolate(arg_text.strip(), env)
    found = corpus.page(query)
    if not found:
        raise ToolError(f"no page found for {query!r}")
    return ToolResult((Passages(tuple(found)),))


def paragraph_retrieve(arg_text: str, env: Mapping[str, Any]) -> ToolResult:
    positional, keywords = keyword_args(arg_text, ["Query"])
    if not positional or "Query" not in keywords:
        raise ToolError("expected ParagraphRetrieve(context, Query: question)")
    paragraphs = _paragraphs(_resolve(positional[0], env))
    query = interpolate(keywords["Query"], env)
    best = rank(BM25Okapi([tokens(str(p)) or ["_"] for p in paragraphs]), paragraphs, query, TOP_PARAGRAPHS)
    return ToolResult((Passages(tuple(best or paragraphs[:1])),))


def qa(arg_text: str, env: Mapping[str, Any], qa_model: QAModel | None) -> ToolResult:
    positional, keywords = keyword_args(arg_text, ["Question"])
    question = interpolate(keywords.get("Question", "").strip(), env)
    if not question:
        raise ToolError("expected QA([context], Question: question)")
    refs = [r for p in positional for r in (split_args(p[1:-1]) if p.startswith("[") and p.endswith("]") else [p])]
    context = "\n".join(value_to_text(_resolve(r, env)) for r in refs if r)
    if qa_model is not None:
        return ToolResult((qa_model.answer(context, question).strip(),))
    return ToolResult((extractive_answer(context, question),), EXTRACTIVE_NOTE)


def extractive_answer(context: str, question: str) -> str:
    """Best sentence by token overlap; a number for numeric questions, yes/no for yes/no questions, else the span
    after the last overlapping word (the whole sentence when nothing follows)."""
    wanted = set(tokens(question))
    candidates = sentences(context.replace("\n", " ")) or [context.strip()]
    numeric = bool(_NUMERIC_Q.search(question))
    # ties go to a sentence holding a number when the question asks for one
    best = max(candidates, key=lambda s: len(wanted & set(tokens(s))) + (0.5 if numeric and _NUMBER.search(s) else 0))
    overlap = wanted & set(tokens(best))
    if _YES_NO.match(question.strip()):
        return "yes" if wanted and len(overlap) / len(wanted) >= 0.6 else "no"
    if numeric:
        numbers = _NUMBER.findall(best)
        if numbers:
            return numbers[0].replace("$", "").replace(",", "")
    words = best.rstrip(".!?").split()
    last = max((i for i, w in enumerate(words) if set(tokens(w)) & overlap), default=-1)
    tail = words[last + 1 :]
    while tail and not tokens(tail[0]):  # drop leading stopwords: "... mayor is Jane Doe" -> "Jane Doe"
        tail = tail[1:]
    tail = " ".join(tail).strip(" ,;:")
    return tail or best


class OpenAIQA:
    """``.answer(context, question)`` through an OpenAI-compatible chat endpoint (``openai`` imported lazily)."""

    def __init__(self, model: str, client: Any = None, base_url: str | None = None, api_key: str | None = None):
        if client is None:
            from openai import OpenAI

            client = OpenAI(base_url=base_url, api_key=api_key)
        self.client, self.model = client, model

    def answer(self, context: str, question: str) -> str:
        prompt = f"Context:\n{context}\n\nQuestion: {question}\nAnswer with a short phrase only."
        response = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}], temperature=0
        )
        return (response.choices[0].message.content or "").strip()
