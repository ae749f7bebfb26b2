"""The ``openai`` critic against a real local HTTP server speaking ``POST /v1/chat/completions``.

The fake server picks its behaviour from a ``[[marker]]`` in the prompt's task text (429 then success, 500 then
success, 500 forever, a slow reply, a malformed body, a ``<think>`` prefix, finish_reason ``length``, ...) and
records every request: marker, Authorization header and how many requests were in flight at once.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import Counter
from email.utils import formatdate

import pytest

from engine.config import CriticSection
from engine.critics import make_critic
from engine.critics.base import Grounding
from engine.critics.openai_backend import OpenAICritic, retry_after_s
from engine.critics.prompts import critic_messages
from engine.store import Store
from engine.tasks import Task
from tests._local_http import JSONHandler, local_server

SECRET = "sk-test-SECRET-0123456789"
# A reply this slow only arrives if the client ignored its 0.5 s timeout: elapsed time far below it shows that the
# timeout worked, with a wide margin for a loaded machine (the handler thread is a daemon; nobody waits for it).
SLOW_REPLY_S = 60.0
CORRECTION = ("Corrected Subgoals: Subgoal 1: Multiply 3 by 4.; Subgoal 2: Subtract from 20.\n"
              "Corrected Actions: R1 = Calculator(3*4); R2 = Calculator(20-R1)")


class FakeOpenAI:
    """Scripted behaviours keyed by the prompt's ``[[marker]]``; thread-safe request log."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.auth: list[str | None] = []
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def enter(self, marker: str, auth: str | None, body: dict) -> int:
        with self.lock:
            self.counts[marker] += 1
            self.auth.append(auth)
            self.bodies.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.counts[marker]

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    @staticmethod
    def completion(body: dict, content: str, finish: str = "stop") -> tuple[int, dict, bytes, float]:
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        data = {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4 + 1,
                          "total_tokens": prompt + len(content) // 4 + 1}}
        return 200, {}, json.dumps(data).encode(), 0.0

    @staticmethod
    def failure(status: int, message: str, headers: dict | None = None) -> tuple[int, dict, bytes, float]:
        return status, headers or {}, json.dumps({"error": {"message": message, "type": "test"}}).encode(), 0.0

    def behave(self, marker: str, n: int, auth: str | None, body: dict) -> tuple[int, dict, bytes, float]:
        ok = self.completion(body, "Final answer reached")
        if marker == "r429":
            return self.failure(429, "slow down", {"Retry-After": "1"}) if n == 1 else ok
        if marker == "refusal":  # an OpenAI model's safety refusal: no content, the reason in "refusal"
            data = json.loads(self.completion(body, "")[2])
            refusal = "I can't help with that."
            data["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": refusal}
            return 200, {}, json.dumps(data).encode(), 0.0
        if marker == "quota":  # OpenAI's answer to an account out of credit
            return 429, {}, json.dumps({"error": {"message": "You exceeded your current quota", "type":
                                                  "insufficient_quota", "code": "insufficient_quota"}}).encode(), 0.0
        if marker == "r408":  # a proxy's own timeout, then the request goes through
            return self.failure(408, "upstream timed out") if n == 1 else ok
        if marker == "r500":
            return self.failure(500, "boom") if n == 1 else ok
        if marker == "500":
            return self.failure(500, "boom forever")
        if marker == "401":
            return self.failure(401, "Incorrect API key provided")
        if marker == "400":
            return self.failure(400, f"bad request from {auth}")
        if marker == "slow":
            return ok[:3] + (SLOW_REPLY_S,)
        if marker == "slowok":
            return ok[:3] + (0.3,)
        if marker == "notjson":
            return 200, {"Content-Type": "application/json"}, b"<html>gateway hiccup</html>", 0.0
        if marker == "error200":  # a proxy (LiteLLM, a gateway) that wraps the upstream's failure in a 200
            error = {"error": {"message": f"upstream overloaded ({auth})", "code": 503}}
            return 200, {}, json.dumps(error).encode(), 0.0
        if marker == "nochoices":
            return 200, {}, json.dumps({"id": "x", "object": "chat.completion", "created": 0}).encode(), 0.0
        if marker == "think":
            return self.completion(body, "<think>R1 = 12, then 20 - 12 = 8. Looks right.</think>\n\nFinal answer "
                                         "reached.")
        if marker == "length":
            return self.completion(body, CORRECTION, "length")
        if marker == "correct":
            return self.completion(body, CORRECTION)
        if marker == "qa":
            return self.completion(body, "Brindleford")
        if marker == "surrogate":  # json.dumps writes the lone half as the escape \ud800, which JSON allows
            return self.completion(body, CORRECTION.replace("3*4", "3*4\ud800"))
        if marker == "echo":
            return self.completion(body, f"Your header was {auth}. Final answer reached")
        return ok


class Handler(JSONHandler):
    def do_POST(self) -> None:
        fake: FakeOpenAI = self.server.state  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        text = " ".join(m.get("content", "") for m in body.get("messages", []))
        found = re.search(r"\[\[([\w-]+)\]\]", text)
        marker = found.group(1) if found else "default"
        n = fake.enter(marker, self.headers.get("Authorization"), body)
        try:
            status, headers, payload, delay = fake.behave(marker, n, self.headers.get("Authorization"), body)
            time.sleep(delay)
        finally:
            fake.leave()
        self._send(status, payload, headers)


@pytest.fixture
def fake_server():
    """``(FakeOpenAI, base_url)`` for a ThreadingHTTPServer on a free port of 127.0.0.1."""
    with local_server(Handler, FakeOpenAI()) as served:
        yield served


def _config(base_url: str, **kw) -> CriticSection:
    values = dict(backend="openai", base_url=base_url, model="critic-m", api_key_env="MOAT_TEST_CRITIC_KEY",
                  max_tokens=256, timeout_s=5.0, max_retries=2, concurrency=4)
    values.update(kw)
    return CriticSection(**values)


def _item(marker: str, index: int = 0) -> Grounding:
    task = Task(id=f"t{index}", domain="maths", source="test", split="train",
                question=f"[[{marker}]] #{index} Tom buys 3 pens at 4 dollars and pays with 20. Change?", answer="8")
    return Grounding(task, 0, 0, ["Multiply 3 by 4.", "Subtract from 20."],
                     "R1 = Calculator(3*4); R2 = Calculator(20+R1)",
                     {"ok": True, "values": {"R1": "12", "R2": "32"}, "answer": "32", "error": None}, False)


def _critic(base_url: str, store=None, **kw) -> OpenAICritic:
    return OpenAICritic(_config(base_url, **kw), store, backoff_base_s=0.01)


def test_429_with_retry_after_then_success(fake_server):
    fake, url = fake_server
    start = time.perf_counter()
    [verdict] = _critic(url).judge([_item("r429")])
    assert time.perf_counter() - start >= 0.9  # Retry-After: 1 was honoured
    assert fake.counts["r429"] == 2
    assert verdict.status == "accepted" and verdict.extra["attempts"] == 2
    assert verdict.latency_s >= 0.9


def test_500_then_success_and_500_forever_is_bounded(fake_server):
    fake, url = fake_server
    good, bad = _critic(url, max_retries=3).judge([_item("r500"), _item("500")])
    assert good.status == "accepted" and fake.counts["r500"] == 2
    assert bad.status == "error" and "500" in bad.raw and "InternalServerError" in bad.raw
    assert fake.counts["500"] == 1 + 3 and bad.extra["attempts"] == 4


def test_a_proxys_408_is_retried_as_a_timeout(fake_server):
    """A 408 (a proxy in front of a slow server timing the request out) was "another 4xx": never retried and stored
    as the item's error verdict, while our own timeout on the same request was retried. It is a timeout now."""
    import httpx
    import openai

    from engine.critics.openai_backend import is_retryable, is_unreachable

    fake, url = fake_server
    [verdict] = _critic(url).judge([_item("r408")])
    assert verdict.status == "accepted" and verdict.extra["attempts"] == 2 and fake.counts["r408"] == 2
    exc = openai.APIStatusError("timed out", response=httpx.Response(408, request=httpx.Request("POST", url)),
                                body=None)
    assert is_retryable(exc) and is_unreachable(exc)  # 408 after every retry: the server cannot answer in time


def test_a_429_out_of_quota_is_not_retried_and_marks_the_critic_unusable(fake_server):
    """Retrying ``insufficient_quota`` only waited out the backoff of every retry before the stage failed anyway."""
    fake, url = fake_server
    [verdict] = _critic(url, max_retries=3).judge([_item("quota")])
    assert verdict.status == "error" and fake.counts["quota"] == 1 and verdict.extra["unreachable"] is True
    assert "exceeded your current quota" in verdict.raw


def test_a_models_refusal_is_kept_in_the_verdicts_raw_text(fake_server):
    """A refusal came back as an empty reply: the curator saw a blank verdict and no reason."""
    _, url = fake_server
    [verdict] = _critic(url).judge([_item("refusal")])
    assert verdict.raw == "(refused by the model) I can't help with that." and verdict.status != "accepted"


def test_other_4xx_is_never_retried(fake_server, monkeypatch):
    monkeypatch.setenv("MOAT_TEST_CRITIC_KEY", SECRET)
    fake, url = fake_server
    [verdict] = _critic(url).judge([_item("400")])
    assert verdict.status == "error" and fake.counts["400"] == 1
    assert SECRET not in verdict.raw and "***" in verdict.raw  # the server echoed the key; we masked it


def test_slow_reply_times_out_within_bounds(fake_server):
    fake, url = fake_server
    start = time.perf_counter()
    [verdict] = _critic(url, timeout_s=0.5, max_retries=1).judge([_item("slow")])
    elapsed = time.perf_counter() - start
    assert verdict.status == "error" and "Timeout" in verdict.raw
    assert fake.counts["slow"] == 2
    assert elapsed < SLOW_REPLY_S / 2  # two 0.5 s attempts and a short backoff, never the server's reply time


@pytest.mark.parametrize("marker", ["notjson", "nochoices"])
def test_malformed_body_is_an_error_verdict(fake_server, marker):
    fake, url = fake_server
    [verdict] = _critic(url).judge([_item(marker)])
    assert verdict.status == "error" and verdict.raw
    assert fake.counts[marker] == 1  # a malformed 200 is not retried


def test_think_prefix_correction_and_length(fake_server):
    _, url = fake_server
    think, corrected, cut = _critic(url).judge([_item("think"), _item("correct"), _item("length")])
    assert think.status == "accepted" and think.raw.startswith("<think>")
    assert corrected.status == "corrected" and corrected.corrected_actions == "R1 = Calculator(3*4); R2 = " \
                                                                              "Calculator(20-R1)"
    assert corrected.corrected_subgoals == ["Multiply 3 by 4.", "Subtract from 20."]
    assert cut.status == "truncated" and cut.finish_reason == "length" and cut.raw == CORRECTION
    for v in (think, corrected, cut):
        assert v.backend == "openai" and v.model == "critic-m" and v.prompt_tokens > 0 and v.completion_tokens > 0
        assert v.latency_s is not None and v.latency_s >= 0


def test_request_carries_explicit_sampling_settings(fake_server):
    fake, url = fake_server
    _critic(url, max_tokens=321, temperature=0.1, top_p=0.95).judge([_item("default")])
    [body] = fake.bodies
    assert body["max_tokens"] == 321 and body["temperature"] == 0.1 and body["top_p"] == 0.95
    assert body["model"] == "critic-m" and [m["role"] for m in body["messages"]] == ["system", "user"]


def test_api_key_is_sent_but_never_stored(fake_server, monkeypatch, tmp_path):
    monkeypatch.setenv("MOAT_TEST_CRITIC_KEY", SECRET)
    fake, url = fake_server
    with Store(tmp_path / "c.duckdb") as store:
        [verdict] = _critic(url, store).judge([_item("echo")])
        assert fake.auth == [f"Bearer {SECRET}"]
        assert verdict.status == "accepted" and SECRET not in verdict.raw
        rows = store.query("SELECT * FROM critic_cache").to_dict("records")
        assert len(rows) == 1 and SECRET not in json.dumps(rows, default=str)


def test_missing_key_env_sends_a_placeholder(fake_server, monkeypatch):
    monkeypatch.delenv("MOAT_TEST_CRITIC_KEY", raising=False)
    fake, url = fake_server
    _critic(url).judge([_item("default")])
    assert fake.auth == ["Bearer EMPTY"]


def test_a_refused_key_says_which_variable_held_it_or_that_none_was_set(fake_server, monkeypatch):
    """A 401 read "AuthenticationError: Error code: 401 - Incorrect API key provided" while the client had sent the
    placeholder EMPTY because the variable was unset: the error now says which, never the key."""
    _, url = fake_server
    monkeypatch.delenv("MOAT_TEST_CRITIC_KEY", raising=False)
    [unset] = _critic(url, max_retries=0).judge([_item("401")])
    assert unset.raw.endswith("($MOAT_TEST_CRITIC_KEY is unset, so the placeholder key EMPTY was sent)")
    monkeypatch.setenv("MOAT_TEST_CRITIC_KEY", SECRET)
    [refused] = _critic(url, max_retries=0).judge([_item("401")])
    assert refused.raw.endswith("(the key in $MOAT_TEST_CRITIC_KEY, critic.api_key_env, was refused)")
    assert SECRET not in refused.raw and refused.extra["unreachable"] is True


def test_requests_run_concurrently_but_bounded(fake_server):
    fake, url = fake_server
    verdicts = _critic(url, concurrency=3).judge([_item("slowok", i) for i in range(7)])
    assert [v.status for v in verdicts] == ["accepted"] * 7
    assert 2 <= fake.max_in_flight <= 3


def test_second_judge_hits_the_cache(fake_server, tmp_path):
    fake, url = fake_server
    items = [_item("correct", 0), _item("default", 1), _item("500", 2), _item("length", 3), _item("default", 1)]
    with Store(tmp_path / "c.duckdb") as store:
        first = _critic(url, store, max_retries=0).judge(items)
        assert [v.status for v in first] == ["corrected", "accepted", "error", "truncated", "accepted"]
        assert fake.counts["default"] == 1  # the duplicate prompt was sent once
        sent = fake.total
        second = _critic(url, store, max_retries=0).judge(items[:2])
        assert fake.total == sent  # zero HTTP requests
        assert [v.status for v in second] == ["corrected", "accepted"]
        assert all(v.latency_s == 0 and v.extra["cache"] == "hit" for v in second)
        assert second[0].corrected_actions == first[0].corrected_actions
        assert store.query("SELECT count(*) AS n FROM critic_cache").n[0] == 2  # errors/truncations not cached
        _critic(url, store, max_retries=0).judge(items[2:4])
        assert fake.total == sent + 2  # the error and the truncated reply are asked again


def test_the_cache_is_keyed_by_the_sampling_settings_and_can_be_bypassed(fake_server, tmp_path):
    """The cache was keyed by the model and the messages only: a run at another temperature (or token budget) got the
    first run's replies back without one request, and a server fixed since could not be asked again. The sampling
    settings are part of the key now, and ``critic.cache = false`` asks every time (and still stores the reply)."""
    fake, url = fake_server
    with Store(tmp_path / "c.duckdb") as store:
        _critic(url, store).judge([_item("default")])
        assert _critic(url, store).judge([_item("default")])[0].extra["cache"] == "hit" and fake.total == 1
        for setting in ({"temperature": 0.7}, {"top_p": 0.5}, {"max_tokens": 512}):
            [verdict] = _critic(url, store, **setting).judge([_item("default")])
            assert verdict.extra["cache"] == "miss", setting
        assert fake.total == 4
        [fresh] = _critic(url, store, cache=False).judge([_item("default")])
        assert fresh.extra["cache"] == "miss" and fake.total == 5
        assert _critic(url, store, temperature=0.7).judge([_item("default")])[0].extra["cache"] == "hit"


def test_entries_cached_before_the_key_held_the_settings_are_still_read_at_the_default_settings(fake_server,
                                                                                                  tmp_path):
    """The key change would have made an upgraded store ask again for every prompt of a critique (hours of a paid
    API at scale): an entry under the old key (the messages alone) is read while the settings are the defaults,
    which nearly every old entry was made with, and not otherwise."""
    from engine.critics.openai_backend import Reply, prompt_key

    fake, url = fake_server
    item = _item("default")
    with Store(tmp_path / "c.duckdb") as store:
        old = Reply("Final answer reached", "stop", 10, 3)
        store.write("critic_cache", [{"model": "critic-m", "prompt_sha256": prompt_key(critic_messages(item)),
                                      "response_json": old.to_json()}])
        defaults = CriticSection()
        at_defaults = dict(temperature=defaults.temperature, top_p=defaults.top_p, max_tokens=defaults.max_tokens)
        [verdict] = _critic(url, store, **at_defaults).judge([item])
        assert verdict.extra["cache"] == "hit" and verdict.status == "accepted" and fake.total == 0
        [other] = _critic(url, store, **{**at_defaults, "temperature": 0.7}).judge([item])
        assert other.extra["cache"] == "miss" and fake.total == 1


def test_unreachable_server_and_bad_domain_never_raise():
    critic = _critic("http://127.0.0.1:9/v1", max_retries=1)
    odd = _item("default")
    odd.task.domain = "chess"
    verdicts = critic.judge([_item("default"), odd])
    assert [v.status for v in verdicts] == ["error", "error"]
    assert "Connection" in verdicts[0].raw and "chess" in verdicts[1].raw


def test_retry_after_header_forms():
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert 8 <= retry_after_s({"retry-after": formatdate(time.time() + 10, usegmt=True)}) <= 10
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


def test_make_critic_builds_each_backend(fake_server):
    _, url = fake_server
    assert make_critic(_config(url)).name == "openai"
    assert make_critic(CriticSection(backend="hf", model="some/dir")).name == "hf"
    assert make_critic(CriticSection()).name == "reference"


# -- the critique stage and the CLI, end to end ---------------------------------------------------------------

@pytest.fixture
def grounded_run(tiny_run):
    """A run whose iteration 1 has plans, scores and groundings (tiny models, few tasks): ``(db, run_id)``."""
    return tiny_run("score.batch_size=8", "ground.max_new_tokens=16", "ground.batch_size=8", "ground.which=all",
                    stages=("sample", "score", "ground"))


@pytest.mark.slow
def test_critique_stage_and_cli_against_the_fake_server(fake_server, grounded_run, monkeypatch, capsys):
    from engine.__main__ import main
    from engine.loop import run_config, run_stage

    monkeypatch.setenv("MOAT_TEST_CRITIC_KEY", SECRET)
    fake, url = fake_server
    db, run_id = grounded_run
    with Store(db) as store:
        config = run_config(store, run_id)
        for key, value in (("backend", "openai"), ("base_url", url), ("model", "critic-m"),
                           ("api_key_env", "MOAT_TEST_CRITIC_KEY"), ("concurrency", 3)):
            setattr(config.critic, key, value)
        assert run_stage(store, run_id, 1, "critique", config=config) == "done"
        groundings = store.frame("groundings", run_id, 1)
        verdicts = store.frame("verdicts", run_id, 1)
        assert len(groundings) > 0 and len(verdicts) == len(groundings)
        assert set(map(tuple, verdicts[["task_id", "step", "k"]].values)) == \
            set(map(tuple, groundings[["task_id", "step", "k"]].values))
        assert set(verdicts.backend) == {"openai"} and set(verdicts.model) == {"critic-m"}
        assert set(verdicts.status) == {"accepted"} and set(verdicts.finish_reason) == {"stop"}
        assert verdicts.latency_s.notna().all() and (verdicts.prompt_tokens > 0).all()
        assert (verdicts.completion_tokens > 0).all() and not verdicts.reference_guided.any()
        assert fake.total > 0 and set(fake.auth) == {f"Bearer {SECRET}"}
        for table in ("verdicts", "critic_cache", "runs", "stages"):
            dump = json.dumps(store.query(f"SELECT * FROM {table}").to_dict("records"), default=str)
            assert SECRET not in dump, table
        store.delete("verdicts", run_id, 1)
        config.critic.api_key_env = "OPENAI_API_KEY"
    sent = fake.total
    code = main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--critic", "openai",
                 "--base-url", url, "--model", "critic-m", "--quiet"])
    assert code == 0 and '"status": "done"' in capsys.readouterr().out
    assert fake.total == sent  # the re-run was served from the cache
    with Store(db) as store:
        again = store.frame("verdicts", run_id, 1)
        assert len(again) == len(groundings) and set(again.status) == {"accepted"}
        assert (again.latency_s == 0).all()


def test_qa_tool_answers_through_an_openai_compatible_model(fake_server):
    """The QA(...) action asks the configured model instead of the extractive fallback."""
    from engine.executor import ToolEnv, execute
    from engine.tools.qa import Corpus, OpenAIQA

    fake, base_url = fake_server
    corpus = Corpus.from_context(["Alma Varden: Alma Varden was born in Brindleford. Alma Varden was a pilot."])
    actions = ("R1 = KnowledgeQuery(Alma Varden); R2 = ParagraphRetrieve(R1, Query: Where was Alma Varden born?); "
               "R3 = QA([R2], Question: [[qa]] Where was Alma Varden born?)")
    model = OpenAIQA("qa-model", base_url=base_url, api_key="EMPTY")
    result = execute(actions, "qa", ToolEnv(corpus=corpus, qa_model=model))
    assert result.ok and result.answer == "Brindleford" and fake.counts["qa"] == 1
    assert result.steps[-1].note is None  # a model's answer is not labelled as the extractive fallback
    offline = execute(actions, "qa", ToolEnv(corpus=corpus))
    assert offline.steps[-1].note == "extractive fallback"


def test_curation_edit_and_its_preview_use_the_runs_qa_model(fake_server, tmp_path):
    """A curator's edit (engine.verdict_curation) and the critic tab's preview execute QA(...) with the model the run's
    config names, exactly as the ground stage does; without one they use the extractive fallback."""
    from engine.verdict_curation import edit_correction
    from studio.tab_critic import preview_edit
    from tests._store_world import IT, RUN, build_world

    fake, base_url = fake_server
    actions = "R1 = KnowledgeQuery(Ada Lovelace); R2 = QA([R1], Question: [[qa]] Where was Ada Lovelace born?)"
    with Store(tmp_path / "s.duckdb") as store:
        build_world(store)
        assert edit_correction(store, RUN, IT, "q1", 0, 0, actions).preview.answer.startswith("London")  # extractive
        assert fake.counts["qa"] == 0
        store.write("runs", [{"run_id": RUN, "name": "world", "run_dir": "runs/world", "config_json": {
            "tools": {"qa_model": "qa-model", "qa_base_url": base_url}}}])
        assert "Brindleford" in preview_edit(store, RUN, "q1|0|0", actions) and fake.counts["qa"] == 1
        result = edit_correction(store, RUN, IT, "q1", 0, 0, actions).preview
        assert result.answer == "Brindleford" and fake.counts["qa"] == 2


def test_a_critic_that_never_answers_fails_the_stage_and_run_prints_its_summary(tiny_run, fake_server, capsys):
    """A critic server that is down (wrong port, nothing listening) used to leave every verdict "error", the stage
    "done" and the run "done", with SFT skipped for want of verdicts. Now the stage fails with the critic's
    settings and first error, stores none of the batch, `run` still ends with its JSON line (exit 1), and judging
    again with a reachable server finishes the stage."""
    from engine.__main__ import main
    from engine.loop import run_stage

    _, url = fake_server
    with socket.socket() as probe:  # a port nothing listens on: connection refused at once
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    db, run_id = tiny_run("critic.backend=openai", f"critic.base_url={dead}", "critic.model=critic-m",
                          "critic.max_retries=0", "ground.max_new_tokens=8", stages=("sample", "score", "ground"))
    with Store(db) as store:
        with pytest.raises(RuntimeError, match=r"could not judge any of the \d+ groundings .*critic.base_url = "
                                               r"http://127.0.0.1:\d+/v1; first error: APIConnectionError.*"
                                               rf"step critique --db {re.escape(str(db))} --run {run_id} "):
            run_stage(store, run_id, 1, "critique")
        assert store.stage_status(run_id, 1)["critique"]["status"] == "failed"
        assert store.count("verdicts", run_id, 1) == 0
    assert main(["run", "--run", run_id, "--db", str(db), "--iterations", "1", "--quiet"]) == 1
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    assert "error: iteration 1, stage critique failed: RuntimeError: the critic could not judge" in err
    assert "Traceback" not in err and f"run --run {run_id}" in err
    assert main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--base-url", url,
                 "--quiet"]) == 0
    with Store(db) as store:
        assert store.stage_status(run_id, 1)["critique"]["status"] == "done"
        assert store.count("verdicts", run_id, 1) == store.count("groundings", run_id, 1) > 0


class _RefusesEveryItem(FakeOpenAI):
    """A critic server that is up and answers every request with a 400 about the request itself."""

    def behave(self, marker: str, n: int, auth: str | None, body: dict) -> tuple[int, dict, bytes, float]:
        return self.failure(400, "this model's maximum context length is 8 tokens")


def test_a_batch_refused_whole_fails_the_stage_and_an_item_judged_again_alone_is_its_verdict(tiny_run):
    """A batch of several prompts every one refused with 400 is a setting they all carry (vLLM refuses every request
    whose max_tokens exceeds its context): the verdicts were stored as errors, the stage read done and the grounder
    trained on no correction. It fails the stage now, naming the settings. An item judged again alone
    (``--retry-errors``) that the server refuses is that item's verdict: it would fail again on every resume."""
    from engine.__main__ import main
    from engine.loop import run_stage

    with local_server(Handler, _RefusesEveryItem()) as (_, url):
        # critic.cache off: the grounding made an error below is judged (and would be cached) fine by a good server
        db, run_id = tiny_run("critic.backend=openai", f"critic.base_url={url}", "critic.model=critic-m",
                              "critic.max_retries=0", "ground.max_new_tokens=8", "critic.cache=false",
                              stages=("sample", "score", "ground"))
        with Store(db) as store:
            assert store.count("groundings", run_id, 1) > 1
            with pytest.raises(RuntimeError, match=r"could not judge any of the \d+ groundings .*maximum context "
                                                   r"length.*refused as invalid: check .*critic.max_tokens"):
                run_stage(store, run_id, 1, "critique")
            assert store.count("verdicts", run_id, 1) == 0
    with local_server(Handler, FakeOpenAI()) as (_, good):
        assert main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--base-url", good,
                     "--quiet"]) == 0
    with Store(db) as store:
        judged = store.count("verdicts", run_id, 1)
        first = store.query("SELECT task_id, step, k FROM verdicts WHERE run_id = ? ORDER BY task_id, step, k "
                            "LIMIT 1", [run_id]).iloc[0]
        with store._cursor() as cur:  # one grounding the critic failed on before
            cur.execute("UPDATE verdicts SET status = 'error' WHERE run_id = ? AND iteration = 1 AND task_id = ? AND "
                        "step = ? AND k = ?", [run_id, first["task_id"], int(first["step"]), int(first["k"])])
    with local_server(Handler, _RefusesEveryItem()) as (_, url):
        assert main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--base-url", url,
                     "--retry-errors", "--quiet"]) == 0
    with Store(db) as store:
        assert store.stage_status(run_id, 1)["critique"]["status"] == "done"
        assert store.count("verdicts", run_id, 1) == judged
        raws = store.query("SELECT raw FROM verdicts WHERE run_id = ? AND status = 'error'", [run_id])["raw"]
        assert len(raws) == 1 and raws.str.contains("maximum context length").all()


class _NotAChatServer(FakeOpenAI):
    """Another kind of web service on the critic's URL: every request answered 200 with an HTML page."""

    def behave(self, marker: str, n: int, auth: str | None, body: dict) -> tuple[int, dict, bytes, float]:
        return 200, {"Content-Type": "application/json"}, b"<html>welcome to the dashboard</html>", 0.0


def test_a_batch_answered_whole_with_no_chat_completion_fails_the_stage(tiny_run):
    """A server of another kind on the critic's URL answers every request, with no chat completion: every verdict was
    an error, stored, and the stage read done (exit 0, nothing said). A batch of several answered so is taken for a
    critic that cannot be used, as an unreachable one is; one malformed reply among good ones stays the item's."""
    from engine.loop import run_stage

    with local_server(Handler, _NotAChatServer()) as (_, url):
        # critic.cache off: the grounding made an error below is judged (and would be cached) fine by a good server
        db, run_id = tiny_run("critic.backend=openai", f"critic.base_url={url}", "critic.model=critic-m",
                              "critic.max_retries=0", "ground.max_new_tokens=8", "critic.cache=false",
                              stages=("sample", "score", "ground"))
        with Store(db) as store:
            assert store.count("groundings", run_id, 1) > 1
            with pytest.raises(RuntimeError, match=r"could not judge any of the \d+ groundings .*first error: "
                                                   r"JSONDecodeError"):
                run_stage(store, run_id, 1, "critique")
            assert store.count("verdicts", run_id, 1) == 0


def test_groundings_judged_again_get_their_malformed_replies_stored_not_the_stage_failed(tiny_run, capsys):
    """``--retry-errors`` sends again the error verdicts of an iteration: items the server answered badly before
    may be answered badly again, and failing the stage for them wedged the iteration (every resume failed again). The
    malformed-batch rule reads only a chunk judged whole; what is judged again is stored as before."""
    from engine.__main__ import main

    with local_server(Handler, FakeOpenAI()) as (_, good):
        # critic.cache off: the groundings made errors below were judged (and cached) fine by this server
        db, run_id = tiny_run("critic.backend=openai", f"critic.base_url={good}", "critic.model=critic-m",
                              "critic.max_retries=0", "ground.max_new_tokens=8", "critic.cache=false",
                              stages=("sample", "score", "ground", "critique"))
    with Store(db) as store:
        judged = store.count("verdicts", run_id, 1)
        assert judged > 2
        with store._cursor() as cur:  # two groundings the critic failed on before (as a flaky reply leaves them)
            cur.execute("UPDATE verdicts SET status = 'error' WHERE run_id = ? AND iteration = 1 AND task_id IN "
                        "(SELECT task_id FROM verdicts WHERE run_id = ? ORDER BY task_id LIMIT 2)", [run_id, run_id])
        errors = int(store.query("SELECT count(*) AS n FROM verdicts WHERE status = 'error'")["n"][0])
        assert 2 <= errors < judged
    with local_server(Handler, _NotAChatServer()) as (_, bad):
        assert main(["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--base-url", bad,
                     "--retry-errors", "--quiet"]) == 0
    capsys.readouterr()
    with Store(db) as store:
        assert store.stage_status(run_id, 1)["critique"]["status"] == "done"
        assert store.count("verdicts", run_id, 1) == judged
        raws = store.query("SELECT raw FROM verdicts WHERE status = 'error'")["raw"]
        assert len(raws) == errors and raws.str.startswith("JSONDecodeError").all()


def test_one_malformed_reply_among_good_ones_is_that_items_error(fake_server):
    _, url = fake_server
    verdicts = _critic(url, max_retries=0).judge([_item("notjson", 0), _item("default", 1)])
    assert [v.status for v in verdicts] == ["error", "accepted"] and verdicts[0].extra["malformed"] is True


@pytest.mark.parametrize(("marker", "unreachable"), [("500", True), ("400", False), ("notjson", False)])
def test_an_error_verdict_says_whether_the_critic_could_be_used_at_all(fake_server, marker, unreachable):
    _, url = fake_server
    verdict = _critic(url, max_retries=0).judge([_item(marker)])[0]
    assert verdict.status == "error" and verdict.extra["unreachable"] is unreachable


def test_bad_data_met_inside_a_stage_fails_the_stage_and_keeps_the_store_the_run_made(
        tmp_path, tiny_agents_dir, demo_tasks, monkeypatch, capsys):
    """Bad input found by a stage (a file a stage reads, iterations in) is a failed stage: exit 1 with the run's
    JSON line, resumable. It was taken for bad input before any stage ran: exit 2, and the store this command had
    just made (with its run and iteration 0) deleted under the run directory it left behind."""
    from engine import loop
    from engine.__main__ import main
    from engine.errors import DataError
    from engine.tasks import write_tasks

    def reads_a_bad_file(ctx):
        raise DataError("extra.jsonl", 3, "answer", "not a number")

    for table in (loop.STAGES, loop.WARM_START):
        for name in list(table):
            monkeypatch.setitem(table, name, reads_a_bad_file)
    write_tasks(demo_tasks, tmp_path / "tasks.jsonl")
    db = tmp_path / "new" / "s.duckdb"
    code = main(["run", "--db", str(db), "--iterations", "1", "--quiet",
                 "--set", f"data.tasks={tmp_path / 'tasks.jsonl'}", "--set", f"run.workdir={tmp_path / 'runs'}",
                 "--set", f"planner.path={tiny_agents_dir / 'planner'}",
                 "--set", f"grounder.path={tiny_agents_dir / 'grounder'}"])
    out, err = capsys.readouterr()
    assert code == 1 and db.exists()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    assert "stage evaluate failed: DataError: extra.jsonl:3: answer: not a number" in err
    with Store(db) as store:
        assert store.stage_status(summary["run_id"], 0)["evaluate"]["status"] == "failed"


class _DownForSome(FakeOpenAI):
    """A critic server that answers 503 for the prompts holding any text of ``down_for`` (a server overloaded for
    part of a batch), and judges everything else."""

    def __init__(self):
        super().__init__()
        self.down_for: set[str] = set()

    def behave(self, marker: str, n: int, auth: str | None, body: dict) -> tuple[int, dict, bytes, float]:
        text = " ".join(m.get("content", "") for m in body["messages"])
        if any(part in text for part in self.down_for):
            return self.failure(503, "overloaded")
        return super().behave(marker, n, auth, body)


def test_retry_errors_judges_again_only_the_error_verdicts_before_the_grounder_trains(tiny_run, capsys):
    """Part of a batch the critic could not judge is stored as error verdicts and the stage finishes; nothing could
    judge them again (a done stage refused the step). `step critique --retry-errors` now judges those groundings
    alone, keeps every other verdict as it was, and is refused where it would rewrite what SFT trained on."""
    from engine.__main__ import main
    from engine.loop import run_stage

    fake = _DownForSome()
    with local_server(Handler, fake) as (_, url):
        db, run_id = tiny_run("critic.backend=openai", f"critic.base_url={url}", "critic.model=critic-m",
                              "critic.max_retries=0", "ground.max_new_tokens=8", stages=("sample", "score", "ground"))
        with Store(db) as store:
            first = store.query("SELECT task_id FROM groundings WHERE run_id = ? ORDER BY task_id LIMIT 1",
                                [run_id])["task_id"][0]
            fake.down_for = {store.get_task(run_id, first).question}
            assert run_stage(store, run_id, 1, "critique") == "done"
            before = store.query("SELECT task_id, k, status, raw, created_at FROM verdicts WHERE run_id = ? "
                                 "ORDER BY task_id, k", [run_id])
        errors = before[before["status"] == "error"]
        assert set(errors["task_id"]) == {first} and len(errors) < len(before)
        args = ["step", "critique", "--run", run_id, "--iteration", "1", "--db", str(db), "--quiet"]
        assert main([*args, "--retry-errors"]) == 1  # still down: the stage fails, resumable, nothing lost
        assert "could not judge" in capsys.readouterr().err
        with Store(db) as store:
            assert store.stage_status(run_id, 1)["critique"]["status"] == "failed"
            assert store.count("verdicts", run_id, 1) == len(before) - len(errors)
        fake.down_for = set()
        requests = fake.total
        assert main(args) == 0  # a plain step resumes it too; here: the server is back
        assert fake.total - requests == len(errors)  # only the groundings that had no verdict were sent
        with Store(db) as store:
            after = store.query("SELECT task_id, k, status, raw, created_at FROM verdicts WHERE run_id = ? "
                                "ORDER BY task_id, k", [run_id])
        assert len(after) == len(before) and "error" not in set(after["status"])
        kept = before[before["status"] != "error"].reset_index(drop=True)
        assert after[after["task_id"] != first].reset_index(drop=True).equals(kept)  # untouched, not rewritten
        assert main([*args, "--retry-errors"]) == 2
        assert "has no error verdicts to judge again" in capsys.readouterr().err
        with Store(db) as store:
            store.write("verdicts", [{**after.iloc[0].to_dict(), "run_id": run_id, "iteration": 1, "step": 0,
                                      "backend": "openai", "reference_guided": False, "status": "error"}])
            store.set_stage(run_id, 1, "train_grounder", "done")
        assert main([*args, "--retry-errors"]) == 2
        assert "train_grounder of iteration 1 is done" in capsys.readouterr().err
        assert main(["step", "ground", "--run", run_id, "--iteration", "1", "--db", str(db), "--retry-errors"]) == 2
        assert "applies to the critique stage only" in capsys.readouterr().err


def test_an_interrupt_drops_the_requests_not_started(fake_server):
    """A second Ctrl-C raises KeyboardInterrupt where the critique waits for replies; the pool's ``with`` exit then
    waited for every submitted request (up to timeout x retries each) before the interrupt reached the stage. Now the
    requests not started are cancelled: with one in flight at a time, interrupting after the first reply sends no
    more than the one already running."""
    fake, url = fake_server
    critic = _critic(url, concurrency=1)
    keys = [f"k{i}" for i in range(6)]
    messages = {key: critic_messages(_item("slowok", i)) for i, key in enumerate(keys)}
    replies = critic._fetch_all(keys, messages)
    next(replies)  # the first reply is in
    with pytest.raises(KeyboardInterrupt):
        replies.throw(KeyboardInterrupt)
    time.sleep(0.5)  # a request already running finishes; none of the cancelled ones may start
    assert fake.total <= 2, fake.counts


def test_a_reply_holding_a_lone_surrogate_is_judged_and_cached(fake_server, tmp_path):
    """A reply whose JSON holds a ``\\ud800`` escape without its pair decoded to a string no UTF-8 writer takes: the
    cache insert raised and the whole batch failed. The half becomes "?", and the verdict is judged and cached."""
    fake, url = fake_server
    with Store(tmp_path / "c.duckdb") as store:
        [verdict] = _critic(url, store).judge([_item("surrogate")])
        assert verdict.status == "corrected" and verdict.corrected_actions.startswith("R1 = Calculator(3*4?)")
        assert "\ud800" not in verdict.raw and store.query("SELECT count(*) AS n FROM critic_cache").n[0] == 1
        [again] = _critic(url, store).judge([_item("surrogate")])
        assert again.extra["cache"] == "hit" and fake.counts["surrogate"] == 1


class _ListsModels(Handler):
    """The fake critic server with ``GET /v1/models``: the models in ``self.server.state.served`` (``id`` or ``(id,
    owned_by)``; 401 when it holds the string "refuse"), counting the requests in ``state.listed``."""

    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state.listed = getattr(state, "listed", 0) + 1
        if state.served == "refuse":
            self._send(401, json.dumps({"error": {"message": "Incorrect API key provided"}}).encode())
            return
        models = [m if isinstance(m, tuple) else (m, "test") for m in state.served]
        data = [{"id": m, "object": "model", "created": 0, "owned_by": owner} for m, owner in models]
        self._send(200, json.dumps({"object": "list", "data": data}).encode())


def test_a_critic_server_is_probed_before_the_run_starts(monkeypatch):
    """A wrong critic.base_url was found when the critique stage ran (two minutes into the demo, hours at the paper's
    scale). One ``GET /models`` before the run says, as a caution, that nothing answers there, that the key was
    refused, or that the server does not serve critic.model (Ollama's "name:latest" and llama.cpp's one GGUF file,
    which answers to any name, are served); a server that answers as expected, or has no ``/models`` (this file's
    other fake server), draws none."""
    from engine.critics import probe as probe_module
    from engine.critics.openai_backend import probe_caution

    monkeypatch.setattr(probe_module, "PROBE_KEEP_S", 0.0)  # each answer read afresh here
    monkeypatch.delenv("MOAT_TEST_CRITIC_KEY", raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    assert probe_caution(_config(dead)) == (f"critic.base_url = {dead}: nothing answers there now "
                                            "(APIConnectionError); the critique stage will fail unless the server is "
                                            "up by then")
    fake = FakeOpenAI()
    with local_server(_ListsModels, fake) as (_, url):
        for served in (["critic-m", "other"], ["critic-m:latest"], [("/models/judge.gguf", "llamacpp")]):
            fake.served = served
            assert probe_caution(_config(url)) is None, served
        fake.served = ["qwen-7b", "llama-8b"]
        assert probe_caution(_config(url)) == f"critic.model = critic-m: the server at {url} serves qwen-7b, " \
                                              "llama-8b, not this model"
        fake.served = "refuse"
        assert probe_caution(_config(url)) == (f"critic.base_url = {url}: the server refused the placeholder key "
                                               "EMPTY ($MOAT_TEST_CRITIC_KEY is unset) (401); the critique stage "
                                               "will fail with it")
        assert "(critic.api_key_env is empty) (401)" in probe_caution(_config(url, api_key_env=""))
    with local_server(Handler, FakeOpenAI()) as (_, url):  # no GET /models at all: nothing to conclude
        assert probe_caution(_config(url)) is None


def test_the_probe_asks_once_a_minute_per_server_and_only_for_a_run_being_created(tiny_agents_dir, monkeypatch):
    """An experiment creates many runs of one critic: the answer is kept a minute (a server that is down costs 5 s a
    question). A resume, an evaluation or a stored run's cautions never probe: their answer would be stale or beside
    the point."""
    from engine import preflight as preflight_module
    from engine.config import load_config
    from engine.critics import probe as probe_module
    from engine.loop import check_new_run

    monkeypatch.setattr(probe_module, "_probed", {})
    fake = FakeOpenAI()
    fake.served = ["other-model"]
    with local_server(_ListsModels, fake) as (_, url):
        base = ["planner.path=" + str(tiny_agents_dir / "planner"),
                "grounder.path=" + str(tiny_agents_dir / "grounder"), "critic.backend=openai",
                f"critic.base_url={url}", "critic.model=critic-m"]
        config = load_config("examples/demo.toml", base)
        for _ in range(3):
            assert any(c.startswith("critic.model = critic-m") for c in check_new_run(config)[1])
        assert fake.listed == 1
        monkeypatch.setattr(probe_module, "_probed", {})
        assert not any(c.startswith("critic.") for c in preflight_module.preflight(config))  # a resume's check
        no_stage2 = load_config("examples/demo.toml", [*base, "stages.stage2=false"])
        assert not any(c.startswith("critic.") for c in check_new_run(no_stage2)[1])
        assert fake.listed == 1


class _ServesUnderV1(_ListsModels):
    """A vLLM-like server: the API under /v1 only, 404 (a body of no use) everywhere else."""

    def do_GET(self) -> None:
        if self.path != "/v1/models":
            self._send(404, json.dumps({"detail": "Not Found"}).encode())
            return
        super().do_GET()


class _NoModels(Handler):
    """The API at /v1 and no /models anywhere (404)."""

    def do_GET(self) -> None:
        self._send(404, json.dumps({"detail": "Not Found"}).encode())


def test_a_base_url_without_its_v1_or_with_the_endpoint_in_it_is_named_in_the_404(monkeypatch):
    """``critic.base_url = http://host:8000`` (vLLM's own address, without /v1) or the endpoint pasted whole
    (``.../v1/chat/completions``) drew no caution before the run (a 404 at /models read "no /models, nothing to
    conclude"), and the critique stage failed hours later on "NotFoundError: Error code: 404", which names neither
    cause. The probe now cautions when ``base_url/v1`` answers (or the URL holds the endpoint), and a 404's error
    verdict says what to try, within the 300 characters the stage's failure shows."""
    from engine.critics import probe as probe_module
    from engine.critics.openai_backend import probe_caution
    from engine.critics.probe import base_url_hint

    monkeypatch.setattr(probe_module, "PROBE_KEEP_S", 0.0)
    fake = FakeOpenAI()
    fake.served = ["critic-m"]
    with local_server(_ServesUnderV1, fake) as (_, url):
        root = url.removesuffix("/v1")
        for wrong in (root, root + "/", url + "/chat/completions", url + "/chat/completions/"):
            [verdict] = _critic(wrong).judge([_item("default")])
            assert verdict.status == "error" and verdict.extra["unreachable"] is True, wrong
            assert verdict.raw.startswith("NotFoundError (critic.base_url ") and f"try {url})" in verdict.raw[:300]
            assert probe_caution(_config(wrong)) == (f"critic.base_url = {wrong}: the server answers 404 there "
                                                     f"({base_url_hint(wrong)})")
        assert fake.total == 0  # no request reached the API
        [good] = _critic(url).judge([_item("default")])
        assert good.status == "accepted" and probe_caution(_config(url)) is None
    with local_server(_NoModels, FakeOpenAI()) as (_, url):  # 404 at /models and at /v1/models: nothing said
        assert probe_caution(_config(url.removesuffix("/v1"))) is None
    for right in ("https://api.openai.com/v1", "http://h/api/v1", "https://g.example/v1beta/openai/v1/",
                  "https://generativelanguage.googleapis.com/v1beta"):
        assert base_url_hint(right) is None, right


def test_a_200_carrying_an_error_object_shows_its_message(fake_server, monkeypatch):
    """A 200 whose body is ``{"error": {...}}`` (no choices) became "no choices in the reply: 'ChatCompletion'": the
    type's name, not the server's message, which was the only clue (and all the stage's failure showed). The body is
    shown now, the key it echoes masked."""
    monkeypatch.setenv("MOAT_TEST_CRITIC_KEY", SECRET)
    fake, url = fake_server
    [verdict] = _critic(url).judge([_item("error200")])
    assert verdict.status == "error" and verdict.extra["malformed"] is True and fake.counts["error200"] == 1
    assert verdict.raw.startswith("MalformedResponse: no choices in the reply: ")
    assert "upstream overloaded (Bearer ***)" in verdict.raw and SECRET not in verdict.raw
