"""Hand-checked cases for engine.metrics."""

from __future__ import annotations

import pytest
import sympy

from engine.metrics import (
    aggregate,
    answer_number,
    exact_match,
    f1,
    f1_prf,
    is_plain_number,
    maths_correct,
    normalize_answer,
    parse_number,
    score_answer,
    step_success_rate,
    strategyqa_correct,
    yes_no,
)
from engine.tools.mind2web import StepScore


@pytest.mark.parametrize(
    "text, expected",
    [
        ("18", 18),
        ("18.0", 18),
        ("$18", 18),
        ("1,234", 1234),
        ("36/2", 18),
        ("-3.5", sympy.Rational(-7, 2)),
        ("-$3.5", sympy.Rational(-7, 2)),
        ("50%", 50),
        ("18 dollars", 18),
        ("The answer is 18.", 18),
        ("He had 3 apples, then 5, so 12 in all", 12),
        ("1.5e3", 1500),
        ("0.1", sympy.Rational(1, 10)),
        ("2-10 min", 10),  # a range, not -10
        ("5 - 3", 3),  # subtraction, not -3
        (18, 18),
        (0.25, sympy.Rational(1, 4)),
    ],
)
def test_parse_number(text, expected):
    value = parse_number(text)
    assert isinstance(value, sympy.Rational)
    assert value == expected


@pytest.mark.parametrize("text", ["", "abc", "no number here", "10/0", None, True])
def test_parse_number_none(text):
    assert parse_number(text) is None


def test_is_plain_number():
    assert is_plain_number("18") and is_plain_number("$1,234.50") and is_plain_number("18 dollars")
    assert is_plain_number("36/2") and is_plain_number("18.")
    assert not is_plain_number("x-7y") and not is_plain_number("2x") and not is_plain_number("The answer is 18")


@pytest.mark.parametrize("pred", ["18", "18.0", "$18", "36/2", "The answer is 18.", "18 dollars", "$18.00"])
def test_maths_correct_equivalent_forms(pred):
    assert maths_correct(pred, "18")


def test_maths_correct_other_cases():
    assert maths_correct("1234", "1,234")
    assert maths_correct("-3.5", "-7/2")
    assert not maths_correct("17", "18")
    assert not maths_correct("18.01", "18")  # 0.01/18 > 1e-6
    assert maths_correct("18.001", "18", rel_tol=1e-3)
    assert not maths_correct("", "18")
    assert not maths_correct("no idea", "18")
    assert maths_correct("0.0000001", "0")  # absolute floor near zero
    assert maths_correct("1.41421356237", "1.414213562373095")  # a tool's float rounding
    assert not maths_correct("69995", "70000")  # within the old 1e-4: a different answer


@pytest.mark.parametrize("pred", ["1, 2, 3, 18", "-18, 18", "unknown + 18", "x = 18", "18 apples and 3 pears",
                                  "He had 3 apples, then 5, so 18 in all", "(18)"])
def test_an_answer_holding_the_gold_among_other_values_is_wrong(pred):
    """The last number of ``pred`` is 18, which scored it correct: a Calculator of a tuple, an equation's two roots or
    an expression left with an unknown in it reached the gold that way."""
    assert not maths_correct(pred, "18")
    assert answer_number(pred) is None


def test_a_plain_number_is_refused_in_linear_time():
    """Unit words and trailing blanks could both take a space: "18 a" + spaces + "!" backtracked for seconds."""
    import time

    started = time.perf_counter()
    assert not is_plain_number("18 a" + " " * 20_000 + "!")
    assert time.perf_counter() - started < 1.0  # quadratic before: about 10 s at this length
    # Symbolic answers fall back to normalised string equality.
    assert maths_correct("x - 7y", "x-7y")
    assert maths_correct("X-7Y.", "x-7y")
    assert not maths_correct("2x-7y", "x-7y")
    assert not maths_correct("", "")


def test_normalize_answer():
    assert normalize_answer("The  Chief of Protocol!") == "chief of protocol"
    assert normalize_answer("an apple, a pear") == "apple pear"


def test_exact_match():
    assert exact_match("the Chief of Protocol", "Chief of Protocol")
    assert not exact_match("Chief of Staff", "Chief of Protocol")


def test_f1_by_hand():
    assert f1("the Chief of Protocol", "Chief of Protocol") == 1.0
    # pred "chief of staff" vs gold "chief of protocol": 2 common tokens, P = 2/3, R = 2/3 -> F1 = 2/3
    assert f1("Chief of Staff", "Chief of Protocol") == pytest.approx(2 / 3)
    # pred "new york city" vs gold "york": P = 1/3, R = 1 -> F1 = 2 * (1/3) / (4/3) = 0.5
    assert f1_prf("New York City", "York") == pytest.approx((0.5, 1 / 3, 1.0))
    assert f1("Paris", "London") == 0.0


def test_f1_yes_no_rule():
    assert f1("yes", "no") == 0.0
    assert f1("yes", "yes sir") == 0.0  # official rule: a yes/no answer that differs scores 0
    assert f1("Yes.", "yes") == 1.0
    assert f1("noanswer", "something") == 0.0


@pytest.mark.parametrize(
    "text, expected",
    [
        (True, True),
        (False, False),
        ("yes", True),
        ("Yes.", True),
        ("true", True),
        ("TRUE", True),
        ("no", False),
        ("No.", False),
        ("False", False),
        ("Yes, because they are the same", True),
        ("The answer is no.", False),
        ("Answer: yes", True),
        ("maybe", None),
        ("", None),
        (None, None),
    ],
)
def test_yes_no(text, expected):
    assert yes_no(text) is expected


def test_strategyqa_correct():
    assert strategyqa_correct("Yes.", True)
    assert strategyqa_correct("no", "False")
    assert not strategyqa_correct("no", True)
    assert not strategyqa_correct("unsure", False)


def test_step_success_rate():
    steps = [StepScore(True, 1.0, True), StepScore(True, 0.5, False), {"step_success": True}, False]
    assert step_success_rate(steps) == 0.5
    assert step_success_rate([]) == 0.0


def test_score_answer_maths():
    assert score_answer("maths", "The answer is $18.", "18") == {"correct": True}
    assert score_answer("maths", "17", "18") == {"correct": False}


def test_score_answer_qa():
    hotpot = score_answer("qa", "the Chief of Protocol", "Chief of Protocol", source="hotpotqa")
    assert hotpot == {"em": 1.0, "f1": 1.0, "correct": True}
    partial = score_answer("qa", "Chief of Staff", "Chief of Protocol")
    assert partial["correct"] is False and partial["em"] == 0.0 and partial["f1"] == pytest.approx(2 / 3)
    # StrategyQA: gold is a boolean, correctness is yes/no accuracy.
    strategy = score_answer("qa", "Yes, he did.", True, source="strategyqa")
    assert strategy["correct"] is True and strategy["em"] == 0.0
    # HotpotQA yes/no golds keep the official EM as correctness.
    assert score_answer("qa", "Yes, he did.", "yes", source="hotpotqa")["correct"] is False
    assert score_answer("qa", "no", "yes", source="hotpotqa")["f1"] == 0.0


def test_score_answer_web():
    gold = "R1 = CLICK(Env, QUERY: Open the menu); R2 = TYPE(R1, QUERY: Type the city, TEXT: Atlanta)"
    result = score_answer("web", gold, gold)
    assert result["correct"] is True and result["step_success_rate"] == 1.0 and "steps" not in result
    wrong = score_answer("web", "R1 = CLICK(Env, QUERY: Open the menu); garbage", gold)
    assert wrong["correct"] is False and wrong["step_success_rate"] == 0.5


def test_score_answer_unknown_domain():
    with pytest.raises(ValueError, match="unknown domain"):
        score_answer("chess", "e4", "e4")


def test_aggregate():
    rows = [
        {"domain": "maths", "correct": True},
        {"domain": "maths", "correct": False},
        {"domain": "qa", "correct": True, "em": 1.0, "f1": 1.0},
        {"domain": "qa", "correct": False, "em": 0.0, "f1": 0.5},
        {"domain": "qa", "correct": True},  # e.g. a row scored without EM/F1
    ]
    result = aggregate(rows)
    assert result["overall"]["n"] == 5 and result["overall"]["accuracy"] == pytest.approx(3 / 5)
    assert result["by_domain"]["maths"] == {"n": 2, "accuracy": 0.5, "n_accuracy": 2}
    qa = result["by_domain"]["qa"]
    assert qa["n"] == 3 and qa["accuracy"] == pytest.approx(2 / 3)
    assert qa["em"] == 0.5 and qa["f1"] == 0.75 and qa["n_em"] == 2
    assert aggregate([]) == {"overall": {"n": 0}, "by_domain": {}}
