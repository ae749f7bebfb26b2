"""engine.tools.web_actions, mind2web and webshop: parsing both web action forms, Mind2Web step scoring, and
the WebShop boundary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.tools.mind2web import StepScore, make_element_matcher, op_f1, score_episode, score_step, token_f1
from engine.tools.web_actions import (
    WebOperation,
    WebParseError,
    parse_gold_step,
    parse_lumos_action,
    parse_web_operation,
    parse_web_operations,
    split_web_actions,
)
from engine.tools.webshop import WebShopHTTPEnv, WebShopUnavailableError


def _jsonl(samples_dir: Path, name: str) -> list[dict]:
    with open(samples_dir / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# ---------------------------------------------------------------------------------------------------- parsing


def test_parse_lumos_type():
    op = parse_lumos_action("R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)")
    assert op == WebOperation("TYPE", "Type Atlanta as the departure location", "Atlanta")


def test_parse_lumos_query_with_commas_and_parentheses():
    op = parse_lumos_action("R4 = CLICK(R3, QUERY: Choose the option Atlanta, GA (ATL))")
    assert op == WebOperation("CLICK", "Choose the option Atlanta, GA (ATL)", "")
    op = parse_lumos_action("R7 = SELECT(R6, QUERY: Pick (one), or two, TEXT: 6 nights (total))")
    assert (op.op, op.element, op.value) == ("SELECT", "Pick (one), or two", "6 nights (total)")


def test_parse_lumos_without_result_variable_and_trailing_period():
    assert parse_lumos_action("click(Env, QUERY: Proceed to checkout).").element == "Proceed to checkout"


def test_parse_gold_step():
    op = parse_gold_step("[combobox]  Departing from -> TYPE: ATLANTA")
    assert op == WebOperation("TYPE", "Departing from", "ATLANTA", "combobox")
    assert parse_gold_step("[span]  Atlanta, GA (ATL) -> CLICK") == WebOperation(
        "CLICK", "Atlanta, GA (ATL)", "", "span"
    )
    assert parse_gold_step("[span]  6 Nights -> SELECT").value == ""


@pytest.mark.parametrize("text", ["", "hello", "R1 = Calculator(2 + 3)", "R1 = CLICK(Env)", "[a] b -> HOVER"])
def test_parse_rejects(text):
    with pytest.raises(WebParseError):
        parse_web_operation(text)


def test_split_keeps_semicolons_inside_queries():
    text = "R1 = CLICK(Env, QUERY: a; b); R2 = TYPE(R1, QUERY: c, TEXT: d; e)"
    assert split_web_actions(text) == ["R1 = CLICK(Env, QUERY: a; b)", "R2 = TYPE(R1, QUERY: c, TEXT: d; e)"]
    assert parse_web_operations(text)[1].value == "d; e"


def test_parse_web_operations_lenient():
    ops = parse_web_operations("R1 = CLICK(Env, QUERY: a); R2 = HOVER(R1, QUERY: b)", strict=False)
    assert ops == [WebOperation("CLICK", "a"), None]
    ops = parse_web_operations("R1 = CLICK(Env, QUERY: a); garbage; R3 = TYPE(R2, QUERY: c, TEXT: d)", strict=False)
    assert ops == [WebOperation("CLICK", "a"), None, WebOperation("TYPE", "c", "d")]
    with pytest.raises(WebParseError):
        parse_web_operations("nonsense")
    assert parse_web_operations("   ") == []


@pytest.mark.parametrize(
    "name", ["lumos_derived_web_agent_ground_onetime.jsonl", "lumos_derived_web_agent_ground_iterative.jsonl"]
)
def test_every_sample_assistant_action_parses(samples_dir, name):
    count = 0
    for record in _jsonl(samples_dir, name):
        for message in record["messages"]:
            if message["role"] != "assistant" or not re.search(r"\b(CLICK|TYPE|SELECT)\(", message["content"]):
                continue
            ops = parse_web_operations(message["content"])
            assert len(ops) == len(re.findall(r"\bR\d+ = ", message["content"]))
            for op in ops:
                assert op.element and "QUERY" not in op.element and "TEXT:" not in op.element
                assert (op.value != "") == (op.op in ("TYPE", "SELECT"))
            count += len(ops)
    assert count >= 15


def test_onetime_sample_details(samples_dir):
    record = _jsonl(samples_dir, "lumos_derived_web_agent_ground_onetime.jsonl")[0]
    ops = parse_web_operations(record["messages"][-1]["content"])
    assert len(ops) == 11
    assert ops[2] == WebOperation("TYPE", "Type Atlanta as the departure location", "Atlanta")
    assert ops[3].element == "Choose the option Atlanta, GA (ATL)"
    assert ops[6] == WebOperation("SELECT", "Click 6 nights as the living period for the hotel", "6 nights")
    assert ops[9].element == "Apply package to help us find cheapest flight, hotel and room"
    episode = score_episode(ops, ops)
    assert episode["task_success"] and episode["step_success_rate"] == 1.0


def test_every_exemplar_gold_plan_parses(samples_dir):
    exemplars = _jsonl(samples_dir, "lumos_incontext_exemplars.jsonl")
    plans = [r["natural_language_plan"] for r in exemplars if r["domain"] == "web_agent"]
    assert plans
    for plan in plans:
        ops = parse_web_operations(plan)
        assert len(ops) == plan.count(" -> ")
        assert all(op.tag and op.element for op in ops)
    first = parse_web_operations(plans[0])
    assert first[2] == WebOperation("TYPE", "Departing from", "ATLANTA", "combobox")
    assert first[1].element == "Search flights + cruise External Link should open ..."


# ---------------------------------------------------------------------------------------------------- scoring


def test_token_f1_and_op_f1_by_hand():
    # "choose miami" vs "miami": P = 1/2, R = 1 -> 2/3
    assert token_f1("Choose Miami", "miami!") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("a", "") == 0.0
    assert op_f1("TYPE Atlanta", "TYPE ATLANTA") == 1.0
    assert op_f1("TYPE Atlanta", "TYPE ATLANTA", case_sensitive=True) == 0.5
    # {"type", "new", "york"} vs {"type", "york"}: P = 2/3, R = 1 -> 0.8
    assert op_f1("TYPE New York", "TYPE York") == pytest.approx(0.8)
    assert op_f1("CLICK", "TYPE x") == 0.0


def test_score_step_success():
    gold = WebOperation("TYPE", "Departing from", "ATLANTA")
    pred = WebOperation("TYPE", "departing from field", "Atlanta")  # element F1 = 2*(2/3*1)/(5/3) = 0.8
    assert score_step(pred, gold) == StepScore(True, 1.0, True)


def test_score_step_wrong_value_and_wrong_element():
    gold = WebOperation("TYPE", "Departing from", "ATLANTA")
    assert score_step(WebOperation("TYPE", "Departing from", "Boston"), gold) == StepScore(True, 0.5, False)
    assert score_step(WebOperation("TYPE", "Return date", "Atlanta"), gold) == StepScore(False, 1.0, False)
    assert score_step(None, gold) == StepScore(False, 0.0, False)


def test_click_value_is_ignored_and_threshold_configurable():
    gold = WebOperation("CLICK", "Miami")
    pred = WebOperation("CLICK", "Choose Miami as the destination", "extra")  # element F1 = 2*(1/5)/(6/5) = 1/3
    assert score_step(pred, gold).op_f1 == 1.0
    assert score_step(pred, gold).element_correct is False
    assert score_step(pred, gold, threshold=0.3).step_success is True
    assert score_step(pred, gold, element_match=lambda p, g: g.lower() in p.lower()).step_success is True
    assert make_element_matcher(0.9)("Miami beach", "Miami") is False


def test_score_episode_by_hand():
    gold = [
        WebOperation("CLICK", "Flights cruise"),
        WebOperation("TYPE", "Departing from", "ATLANTA"),
        WebOperation("SELECT", "Nights", "6 Nights"),
    ]
    pred = [
        WebOperation("CLICK", "flights + cruise"),  # success
        WebOperation("TYPE", "departing from", "Atlanta GA"),  # element ok, op F1 = 2*(2/3)/(5/3) = 0.8
    ]  # third step missing -> fails
    result = score_episode(pred, gold)
    assert result["n_steps"] == 3 and result["n_predicted"] == 2
    assert result["element_accuracy"] == pytest.approx(2 / 3)
    assert result["op_f1"] == pytest.approx((1.0 + 0.8 + 0.0) / 3)
    assert result["step_success_rate"] == pytest.approx(1 / 3)
    assert result["task_success"] is False
    assert result["steps"][1] == {"element_correct": True, "op_f1": pytest.approx(0.8), "step_success": False}
    assert score_episode(gold + [None], gold)["task_success"] is True  # extra predictions are ignored
    with pytest.raises(ValueError):
        score_episode(pred, [])


# ---------------------------------------------------------------------------------------------------- WebShop


def test_webshop_env_without_url_is_not_implemented():
    from engine.tools.webshop import webshop_env

    with pytest.raises(NotImplementedError, match="WebShop requires its environment server"):
        webshop_env(None)


def test_webshop_unreachable_server_raises_clear_error():
    env = WebShopHTTPEnv("http://127.0.0.1:9", timeout=2)  # port 9 (discard): nothing listens
    with pytest.raises(WebShopUnavailableError, match="WebShop requires its environment server"):
        env.reset(0)


_SEARCH_HTML = """<html><head><title>t</title></head><body>
<div id="instruction-text"><h4>Instruction:<br>Find a large black tee</h4></div>
<button type="submit">Back to Search</button>
<a class="product-link" href="#">B0001</a><h4>Black tee</h4><h5>$10.00</h5>
</body></html>"""
_ITEM_HTML = """<html><body><button>Back to Search</button><button>&lt; Prev</button>
<h4>size</h4><label>small</label><label>large</label><button>Buy Now</button></body></html>"""
_DONE_HTML = "<html><body><h1>Thank you</h1><h3>Your score (min 0.0, max 1.0)</h3><h3>0.75</h3></body></html>"


def test_webshop_http_client_routes_with_a_stub_transport():
    """Checks URL building and page reading against canned HTML; it is not a WebShop environment."""
    seen: list[str] = []

    def fetch(url: str) -> str:
        seen.append(url)
        if "/done/" in url:
            return _DONE_HTML
        return _ITEM_HTML if "/item_page/" in url else _SEARCH_HTML

    env = WebShopHTTPEnv("http://shop:3000/", fetch=fetch)
    assert "Find a large black tee" in env.reset(3)
    assert seen[-1] == "http://shop:3000/fixed_3"
    obs, reward, done = env.step("search[black tee]")
    assert seen[-1] == "http://shop:3000/search_results/fixed_3/black%20tee/1"
    assert "[B0001]" in obs and (reward, done) == (0.0, False)
    env.step("click[B0001]")
    assert seen[-1] == "http://shop:3000/item_page/fixed_3/B0001/black%20tee/1/%7B%7D"
    obs, _, _ = env.step("click[large]")
    assert obs == "You have clicked large."
    assert seen[-1].endswith("/item_page/fixed_3/B0001/black%20tee/1/%7B%27size%27%3A%20%27large%27%7D")
    obs, reward, done = env.step("click[Buy Now]")
    assert seen[-1] == "http://shop:3000/done/fixed_3/B0001/%7B%27size%27%3A%20%27large%27%7D"
    assert (obs, reward, done) == ("Your score (min 0.0, max 1.0): 0.75", 0.75, True)
    with pytest.raises(ValueError):
        env.step("buy it")
    with pytest.raises(ValueError):
        env.reset("a free-text goal the server does not know")
