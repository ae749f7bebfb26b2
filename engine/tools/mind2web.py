"""Mind2Web step scoring, offline: element accuracy, operation F1 (token F1 between ``"OP VALUE"`` strings, as
MindAct computes it over whitespace token sets), step success (element correct and op F1 == 1) and task success
(every gold step succeeds): ``score_step`` / ``score_episode`` on ``engine.tools.web_actions.WebOperation``s.

Offline there are no DOM candidates, so "the predicted element is the gold element" cannot be checked the way
Mind2Web does (by candidate id). The default ``element_match`` is a case-insensitive bag-of-words token F1 >=
``threshold`` (0.5) between the two element texts. That is meaningful when both sides are written the same way
(Lumos QUERY vs Lumos QUERY); a Lumos QUERY ("Type Atlanta as the departure location") against a Mind2Web element
text ("Departing from") needs a real grounding step - pass your own ``element_match`` for that. Values are compared
case-insensitively by default (``case_sensitive=False``). Mind2Web data and DOM candidate ranking are not provided.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from engine.tools.web_actions import WebOperation

DEFAULT_ELEMENT_THRESHOLD = 0.5


@dataclass(frozen=True)
class StepScore:
    element_correct: bool
    op_f1: float
    step_success: bool


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def token_f1(a: str, b: str) -> float:
    """Case-insensitive bag-of-words F1 over ``\\w+`` tokens (punctuation ignored)."""
    ta, tb = _words(a), _words(b)
    if not ta and not tb:
        return 1.0
    same = sum((Counter(ta) & Counter(tb)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(ta), same / len(tb)
    return 2 * precision * recall / (precision + recall)


def make_element_matcher(threshold: float = DEFAULT_ELEMENT_THRESHOLD) -> Callable[[str, str], bool]:
    """The default offline element matcher: ``token_f1(pred, gold) >= threshold``."""
    return lambda predicted, gold: token_f1(predicted, gold) >= threshold


def op_f1(predicted: str, gold: str, case_sensitive: bool = False) -> float:
    """MindAct's ``calculate_f1``: F1 between the whitespace token *sets* of two ``"OP VALUE"`` strings."""
    if not case_sensitive:
        predicted, gold = predicted.lower(), gold.lower()
    pred, label = set(predicted.split()), set(gold.split())
    if not pred and not label:
        return 1.0
    tp = len(pred & label)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(pred), tp / len(label)
    return 2 * precision * recall / (precision + recall)


def score_step(
    predicted: WebOperation | None,
    gold: WebOperation,
    element_match: Callable[[str, str], bool] | None = None,
    threshold: float = DEFAULT_ELEMENT_THRESHOLD,
    case_sensitive: bool = False,
) -> StepScore:
    """Mind2Web step metrics; a missing/unparseable prediction (``None``) fails the step."""
    if predicted is None:
        return StepScore(False, 0.0, False)
    matcher = element_match or make_element_matcher(threshold)
    element_correct = bool(matcher(predicted.element, gold.element))
    f1 = op_f1(predicted.op_string(), gold.op_string(), case_sensitive)
    return StepScore(element_correct, f1, element_correct and f1 == 1.0)


def score_episode(
    pred_ops: Sequence[WebOperation | None],
    gold_ops: Sequence[WebOperation | None],
    element_match: Callable[[str, str], bool] | None = None,
    threshold: float = DEFAULT_ELEMENT_THRESHOLD,
    case_sensitive: bool = False,
) -> dict[str, Any]:
    """Score predicted steps against gold steps position by position.

    Missing predicted steps fail; extra ones are ignored (counted in ``n_predicted``). Returns ``n_steps``,
    ``n_predicted``, ``element_accuracy``, ``op_f1`` (mean), ``step_success_rate``, ``task_success`` and ``steps``
    (one ``StepScore`` dict per gold step).
    """
    if not gold_ops or any(g is None for g in gold_ops):
        raise ValueError("gold episode must hold at least one step and every gold step must be parsed")
    steps = [
        score_step(pred_ops[i] if i < len(pred_ops) else None, gold, element_match, threshold, case_sensitive)
        for i, gold in enumerate(gold_ops)
        if gold is not None
    ]
    n = len(steps)
    return {
        "n_steps": n,
        "n_predicted": len(pred_ops),
        "element_accuracy": sum(s.element_correct for s in steps) / n,
        "op_f1": sum(s.op_f1 for s in steps) / n,
        "step_success_rate": sum(s.step_success for s in steps) / n,
        "task_success": all(s.step_success for s in steps),
        "steps": [asdict(s) for s in steps],
    }
