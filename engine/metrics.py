"""Answer scoring for the evaluation harness: maths, QA (HotpotQA / StrategyQA) and web (Mind2Web steps).

Contract
--------
* ``parse_number(text)`` returns the *last* number written in ``text`` as an exact ``sympy.Rational`` (or ``None``).
  It understands ``18``, ``18.0``, ``$18``, ``1,234``, ``36/2``, ``-3.5``, ``1.5e3``, ``18 dollars`` and
  ``The answer is 18.``. A percent sign is dropped (``50%`` -> 50) because GSM8K/SVAMP gold answers to percent
  questions are written as the bare number. Nothing is ever evaluated: numbers are read with a regular expression
  and built with ``fractions.Fraction`` from their digits.
* ``maths_correct(predicted, gold)``: when the gold answer is a number, the prediction must answer with one number
  (``answer_number``: ``18``, ``$18.00``, ``18 dollars``, ``The answer is 18.``; not ``1, 2, 18``, ``-18, 18`` or
  ``unknown + 18``) within ``rel_tol`` = 1e-6 (relative, with an absolute floor of ``rel_tol`` near zero: float
  rounding only); otherwise (symbolic answers such as ``x-7y``) the two strings must be equal after lower-casing and
  removing spaces, ``$`` and a trailing period.
* ``normalize_answer``, ``exact_match``, ``f1``: the official HotpotQA evaluation (hotpot_evaluate_v1.py, itself the
  SQuAD script) including its yes/no/noanswer rule in F1.
* ``yes_no(text)`` reads a StrategyQA-style boolean; ``strategyqa_correct(pred, gold)`` compares two of them.
* ``step_success_rate`` averages Mind2Web step results (see ``engine.tools.mind2web``).
* ``score_answer(domain, predicted, gold, source)`` returns ``{"correct": bool, ...}`` for one task (extra keys:
  ``em``/``f1`` for qa, episode metrics for web); ``aggregate(rows)`` averages such rows per domain.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import sympy

# ---------------------------------------------------------------------------------------------------- numbers

# A sign only counts when it touches the number and is not glued to a word or digit before it: "x-7y",
# "2-10 min" and "5 - 3" hold no negative number.
_NUMBER_RE = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212])?(?:\$\s*)?(?P<sign2>-)?"
    r"(?P<int>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*/\s*(?P<den>\d+(?:\.\d+)?))?"
    r"(?P<exp>[eE][-+]?\d+)?"
    r"(?P<pct>\s*%)?"
)
# A whole answer that is just a number, optionally with currency, percent, trailing unit words and a full stop.
# Unit words are separated by runs of spaces that nothing else may also match (a space belonging to either the
# words or the trailing blanks made "18 a" + 1,000 spaces + "!" take seconds to refuse).
_PLAIN_NUMBER_RE = re.compile(
    r"^\s*[-+\u2212]?(?:\$\s*)?-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*/\s*\d+(?:\.\d+)?)?(?:[eE][-+]?\d+)?\s*%?(?:\s+[A-Za-z]+)*\s*(?:\.\s*)?$"
)
# What may not stand beside the one number of an answer written as a sentence: another operand or an operator.
_NOT_AN_ANSWER_RE = re.compile(r"[\d+\-\u2212*/^=<>()\[\],]")


def _match_value(match: re.Match[str]) -> Fraction | None:
    value = Fraction(match["int"].replace(",", "") + (match["exp"] or ""))
    if match["den"] is not None:
        den = Fraction(match["den"])
        if den == 0:
            return None
        value /= den
    negative = (match["sign"] in ("-", "\u2212")) != (match["sign2"] == "-")
    return -value if negative else value


def parse_number(text: Any) -> sympy.Rational | None:
    """The last number in ``text`` as an exact ``sympy.Rational``; ``None`` when there is none."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, Fraction)):
        return sympy.Rational(text)
    if isinstance(text, float):
        return sympy.Rational(Fraction(repr(text))) if text == text and abs(text) != float("inf") else None
    last: Fraction | None = None
    for match in _NUMBER_RE.finditer(str(text)):
        value = _match_value(match)
        if value is not None:
            last = value
    return None if last is None else sympy.Rational(last.numerator, last.denominator)


def is_plain_number(text: Any) -> bool:
    """True when ``text`` is a number and nothing else (besides ``$``, ``%``, unit words, a final period)."""
    if isinstance(text, (int, float, Fraction)) and not isinstance(text, bool):
        return True
    return isinstance(text, str) and bool(_PLAIN_NUMBER_RE.match(text))


def _normalise_symbolic(text: str) -> str:
    return re.sub(r"[\s$]", "", str(text).lower()).rstrip(".")


def answer_number(text: Any) -> sympy.Rational | None:
    """The number ``text`` answers with: a plain number (``is_plain_number``), or a sentence whose one number stands
    alone (``The answer is 18.``); None for anything holding another number or an operator beside it (``1, 2, 18``,
    ``-18, 18``, ``unknown + 18``): a tool's unresolved or listed values, which hold the gold among others."""
    if is_plain_number(text):
        return parse_number(text)
    if not isinstance(text, str):
        return None
    found = [m for m in _NUMBER_RE.finditer(text) if _match_value(m) is not None]
    if len(found) != 1 or _NOT_AN_ANSWER_RE.search(text[:found[0].start()] + " " + text[found[0].end():]):
        return None
    return parse_number(found[0].group(0))


def maths_correct(predicted: Any, gold: Any, rel_tol: float = 1e-6) -> bool:
    """Numeric comparison when the gold is a number (``18`` == ``18.0`` == ``$18`` == ``36/2``), else string match.
    The prediction must answer with one number (``answer_number``); ``rel_tol`` absorbs float rounding only (Lumos
    compares the final value exactly; 1e-4 took 69,995 for 70,000)."""
    if is_plain_number(gold):
        want, got = parse_number(gold), answer_number(predicted)
        if want is None or got is None:
            return False
        # Relative tolerance with an absolute floor so that a gold of 0 still accepts 0.00001-level noise.
        return bool(abs(got - want) <= sympy.Rational(Fraction(repr(rel_tol))) * max(abs(want), 1))
    return _normalise_symbolic(str(predicted)) == _normalise_symbolic(str(gold)) != ""


# ---------------------------------------------------------------------------------------------------- HotpotQA


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official HotpotQA/SQuAD)."""
    text = str(s).lower()
    exclude = set(string.punctuation)
    text = "".join(ch for ch in text if ch not in exclude)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(pred: str, gold: str) -> bool:
    return normalize_answer(pred) == normalize_answer(gold)


def f1_prf(pred: str, gold: str) -> tuple[float, float, float]:
    """(F1, precision, recall) as ``f1_score`` in hotpot_evaluate_v1.py."""
    npred, ngold = normalize_answer(pred), normalize_answer(gold)
    # The official script gives 0 whenever a yes/no/noanswer answer is involved and the two differ.
    special = ("yes", "no", "noanswer")
    if (npred in special or ngold in special) and npred != ngold:
        return 0.0, 0.0, 0.0
    ptoks, gtoks = npred.split(), ngold.split()
    same = sum((Counter(ptoks) & Counter(gtoks)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(ptoks), same / len(gtoks)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1(pred: str, gold: str) -> float:
    return f1_prf(pred, gold)[0]


# ---------------------------------------------------------------------------------------------------- StrategyQA

_YES = {"yes", "true"}
_NO = {"no", "false"}


def yes_no(text: Any) -> bool | None:
    """Read a yes/no answer: ``True``/``"Yes."``/``"true"`` -> True, ``"no"``/``False`` -> False, else None.

    Accepts the word alone, as the first word (``"Yes, because ..."``) or after ``answer is`` / ``answer:``.
    """
    if isinstance(text, bool):
        return text
    if text is None:
        return None
    words = re.findall(r"[a-z]+", str(text).lower())
    if not words:
        return None
    candidates = [words[0]]
    for i, word in enumerate(words[:-1]):
        if word == "answer":
            following = words[i + 1 : i + 3]  # "answer is yes" / "answer yes" (after "answer:")
            candidates.extend(w for w in following if w != "is")
            break
    for word in candidates:
        if word in _YES:
            return True
        if word in _NO:
            return False
    return None


def is_yes_no(text: Any) -> bool:
    """True when ``text`` is itself just a yes/no/true/false answer (used to route QA gold answers)."""
    return isinstance(text, bool) or normalize_answer(str(text)) in _YES | _NO


def strategyqa_correct(pred: Any, gold: Any) -> bool:
    want, got = yes_no(gold), yes_no(pred)
    return want is not None and got is not None and want == got


# ---------------------------------------------------------------------------------------------------- web / harness


def step_success_rate(step_results: Iterable[Any]) -> float:
    """Mean step success over ``StepScore`` objects, mappings with ``step_success`` or plain bools; 0 when empty."""
    flags = []
    for result in step_results:
        if isinstance(result, Mapping):
            flags.append(bool(result["step_success"]))
        elif hasattr(result, "step_success"):
            flags.append(bool(result.step_success))
        else:
            flags.append(bool(result))
    return sum(flags) / len(flags) if flags else 0.0


def score_answer(domain: str, predicted: Any, gold: Any, source: str | None = None) -> dict[str, Any]:
    """Score one prediction. Always returns ``{"correct": bool, ...}``.

    * maths: ``maths_correct``.
    * qa: ``em`` and ``f1`` are always reported. ``correct`` is yes/no accuracy when the gold is yes/no (StrategyQA),
      except for HotpotQA sources (``"hotpot"`` in ``source``), whose official metric is EM even for yes/no golds;
      otherwise ``correct`` is EM.
    * web: ``predicted`` and ``gold`` are action texts (Lumos ``R1 = CLICK(...); ...`` or Mind2Web
      ``[tag] text -> OP: value; ...``) or lists of ``WebOperation``; ``correct`` is task success, plus the episode
      metrics of ``engine.tools.mind2web.score_episode``.
    """
    if domain == "maths":
        return {"correct": maths_correct(predicted, gold)}
    if domain == "qa":
        pred_text, gold_text = _answer_text(predicted), _answer_text(gold)
        em = exact_match(pred_text, gold_text)
        result: dict[str, Any] = {"em": float(em), "f1": f1(pred_text, gold_text)}
        hotpot = source is not None and "hotpot" in source.lower()
        result["correct"] = strategyqa_correct(predicted, gold) if is_yes_no(gold) and not hotpot else em
        return result
    if domain == "web":
        from engine.tools.mind2web import score_episode  # local: keeps `import engine.metrics` light
        from engine.tools.web_actions import parse_web_operations

        pred_ops = parse_web_operations(predicted, strict=False) if isinstance(predicted, str) else predicted
        gold_ops = parse_web_operations(gold) if isinstance(gold, str) else gold
        episode = score_episode(pred_ops, gold_ops)
        return {"correct": episode["task_success"], **{k: v for k, v in episode.items() if k != "steps"}}
    raise ValueError(f"unknown domain {domain!r} (expected maths, qa or web)")


def _answer_text(value: Any) -> str:
    # StrategyQA gold answers are JSON booleans; compare them as the words the model is asked to produce.
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


_AVERAGED = ("correct", "em", "f1", "element_accuracy", "op_f1", "step_success_rate")


def _summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"n": len(rows)}
    for key in _AVERAGED:
        values = [float(row[key]) for row in rows if row.get(key) is not None]
        if values:
            name = "accuracy" if key == "correct" else key
            summary[name] = sum(values) / len(values)
            summary[f"n_{name}"] = len(values)
    return summary


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Average scored rows (each a ``score_answer`` dict plus ``"domain"``) overall and per domain.

    Returns ``{"overall": {...}, "by_domain": {domain: {...}}}`` where each summary has ``n`` and, for every metric
    present, its mean (``accuracy`` for ``correct``, ``em``, ``f1``, web episode metrics) and ``n_<metric>``.
    """
    rows = list(rows)
    by_domain: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_domain.setdefault(str(row.get("domain", "unknown")), []).append(row)
    return {
        "overall": _summarise(rows),
        "by_domain": {domain: _summarise(group) for domain, group in sorted(by_domain.items())},
    }
