"""Soak: 1,000 critic calls through the ``critique`` stage against a local fault-injecting OpenAI-compatible server.

The server (a real ``ThreadingHTTPServer`` on 127.0.0.1) decides every reply from the SHA-256 of the prompt and
how many times it has seen that prompt, never from arrival order, so a run is reproducible whatever the thread
timing. About 10% of the prompts meet a fault: 429 with a tiny ``Retry-After``, 500, 503, a reply slower than the
client's timeout, a dropped connection (RST or a plain close, no response), a malformed JSON body, empty
``choices``, a reply cut at ``finish_reason=length``, or 500 on every attempt. Transient faults hit the first
attempt only. The healthy replies accept, correct or ramble (unparsed).

Checked: the stage is ``done``; ``verdicts`` holds exactly one row for each of the 1,000 groundings; each row's
status is the one its prompt's script implies, with the raw text or the error message; the attempts recorded per
verdict equal the requests the server received for that prompt (so retries are counted, bounded by
``1 + max_retries`` and spent only on retryable faults); requests overlap but never exceed ``critic.concurrency``;
exactly the completed replies are cached. Runtime and retry counts are printed (``-s``).
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time
from collections import Counter

import pytest

from engine.config import config_to_dict, load_config
from engine.store import Store
from engine.tasks import Task
from tests._local_http import JSONHandler, local_server

N_TASKS, K = 250, 4  # 1,000 groundings, every prompt different
FAULT_RATE = 0.10
TRANSIENT = ("429", "500", "503", "slow", "reset", "close")  # retried, then the healthy reply
FINAL = ("malformed", "no_choices", "length", "500_forever")  # the same on every attempt
FAULTS = TRANSIENT + FINAL
TIMEOUT_S = 0.5  # the client's per-request timeout in this test
SLOW_S = 0.8  # a "slow" reply takes this long: longer than the timeout
MAX_RETRIES = 3
CORRECTION = ("Corrected Subgoals: Subgoal 1: Multiply 3 by 4.; Subgoal 2: Subtract from 20.\n"
              "Corrected Actions: R1 = Calculator(3*4); R2 = Calculator(20-R1)")
# What an error verdict's raw text may start with: the exception the client ended on.
ERRORS = ("InternalServerError", "RateLimitError", "APITimeoutError", "APIConnectionError", "JSONDecodeError",
          "APIResponseValidationError", "MalformedResponse")
HEALTHY = (("Final answer reached", "accepted"), (CORRECTION, "corrected"), ("Looks fine to me?", "unparsed"))


def script(prompt: str) -> tuple[str | None, int]:
    """``(fault or None, index into HEALTHY)`` for a prompt: a pure function of its text."""
    h = hashlib.sha256(prompt.encode("utf-8")).digest()
    fault = FAULTS[h[4] % len(FAULTS)] if int.from_bytes(h[:4], "big") / 2**32 < FAULT_RATE else None
    return fault, (0, 0, 0, 1, 1, 2)[h[5] % 6]  # half accept, a third correct, a sixth ramble


def expected(prompt: str) -> tuple[str, int]:
    """``(status, attempts)`` the client must end with for this prompt."""
    fault, healthy = script(prompt)
    if fault in TRANSIENT:
        return HEALTHY[healthy][1], 2
    return {None: (HEALTHY[healthy][1], 1), "malformed": ("error", 1), "no_choices": ("error", 1),
            "length": ("truncated", 1), "500_forever": ("error", 1 + MAX_RETRIES)}[fault]


class Faults:
    """Thread-safe request log: requests per prompt, how many of each fault were served, most in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.served: Counter[str] = Counter()
        self.in_flight = self.max_in_flight = 0

    def arrive(self, prompt: str) -> int:
        with self.lock:
            self.seen[prompt] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.seen[prompt]

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def serve(self, kind: str) -> None:
        with self.lock:
            self.served[kind] += 1


class Handler(JSONHandler):
    def do_POST(self) -> None:
        faults: Faults = self.server.state  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        prompt = body["messages"][-1]["content"]
        n = faults.arrive(prompt)
        try:
            self._reply(faults, prompt, n, body)
        finally:
            faults.leave()

    def _reply(self, faults: Faults, prompt: str, n: int, body: dict) -> None:
        fault, healthy = script(prompt)
        if fault in TRANSIENT and n > 1:
            fault = None
        faults.serve(fault or "ok")
        if fault in ("reset", "close"):
            if fault == "reset":  # RST instead of FIN: the client sees "connection reset by peer"
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if fault in ("429", "500", "503", "500_forever"):
            status = 500 if fault == "500_forever" else int(fault)
            headers = {"Retry-After": "0.01"} if fault == "429" else {}
            self._send(status, json.dumps({"error": {"message": f"injected {fault}"}}).encode(), headers)
            return
        if fault == "malformed":
            self._send(200, b'{"id": "x", "choices": [{"message": {"content": "Final ans')
            return
        if fault == "no_choices":
            self._send(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0, "choices": []}).encode())
            return
        if fault == "slow":
            time.sleep(SLOW_S)
        text = HEALTHY[healthy][0] if fault != "length" else CORRECTION[:40]
        data = {"id": "chatcmpl-soak", "object": "chat.completion", "created": 0, "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if fault == "length" else "stop"}],
                "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4 + 1,
                          "total_tokens": len(prompt) // 4 + len(text) // 4 + 1}}
        self._send(200, json.dumps(data).encode())


@pytest.fixture
def fault_server():
    """``(Faults, base_url)`` for the fault-injecting server on a free port of 127.0.0.1."""
    with local_server(Handler, Faults()) as served:
        yield served


def _grounded_store(store: Store, tmp_path, base_url: str) -> tuple[str, object]:
    """A run whose iteration 1 holds N_TASKS x K plans and groundings (written directly: no models needed)."""
    config = load_config(None, [
        f"run.workdir={tmp_path / 'runs'}", "critic.backend=openai", f"critic.base_url={base_url}",
        "critic.model=soak-critic", "critic.api_key_env=MOAT_SOAK_KEY", "ground.which=all",
        f"critic.timeout_s={TIMEOUT_S}", f"critic.max_retries={MAX_RETRIES}", "critic.concurrency=8",
    ])
    run_id = store.create_run("soak", config_to_dict(config), tmp_path / "runs")
    tasks = [Task(id=f"s{i:04d}", domain="maths", source="soak", split="train", answer="8",
                  question=f"Soak #{i}: Tom buys 3 pens at 4 dollars and pays with 20. What is his change?")
             for i in range(N_TASKS)]
    store.put_tasks(run_id, tasks)
    base = {"run_id": run_id, "iteration": 1, "step": 0}
    plans = [{**base, "task_id": t.id, "k": k, "prompt": "p", "text": "Subgoal 1: Multiply.; Subgoal 2: Subtract.",
              "subgoals_json": ["Multiply 3 by 4.", "Subtract from 20."], "well_formed": True}
             for t in tasks for k in range(K)]
    groundings = [{**base, "task_id": t.id, "k": k, "prompt": "p", "ok": True, "correct": k == 0,
                   "actions": f"R1 = Calculator(3*4); R2 = Calculator(20-R1+{k})",
                   "values_json": {"R1": "12", "R2": str(8 + k)}, "answer": str(8 + k), "error": None}
                  for t in tasks for k in range(K)]
    store.write_batch([("plans", plans), ("groundings", groundings)])
    return run_id, config


@pytest.mark.slow
def test_thousand_critic_calls_under_injected_faults(fault_server, tmp_path, monkeypatch):
    from engine.critics import openai_backend
    from engine.critics.base import Grounding
    from engine.critics.prompts import critic_user
    from engine.loop import run_stage
    from engine.stages.context import StageContext
    from engine.stages.critique import groundings_to_judge

    monkeypatch.setattr(openai_backend, "BACKOFF_BASE_S", 0.01)  # 5xx/timeouts without Retry-After: fast backoff
    faults, url = fault_server
    with Store(tmp_path / "soak.duckdb") as store:
        run_id, config = _grounded_store(store, tmp_path, url)
        # What each grounding's prompt is, computed the way the stage builds it, to know its scripted outcome.
        ctx = StageContext(store, run_id, 1, config, tmp_path)
        tasks = {t.id: t for t in store.get_tasks(run_id)}
        want = {}
        for r in groundings_to_judge(ctx).itertuples(index=False):
            item = Grounding(tasks[r.task_id], int(r.step), int(r.k), json.loads(r.subgoals_json), r.actions,
                             {"ok": bool(r.ok), "values": json.loads(r.values_json), "answer": r.answer,
                              "error": r.error}, bool(r.correct))
            want[(r.task_id, int(r.step), int(r.k))] = (critic_user(item), *expected(critic_user(item)))
        assert len(want) == N_TASKS * K and len({p for p, _, _ in want.values()}) == N_TASKS * K

        start = time.perf_counter()
        assert run_stage(store, run_id, 1, "critique", config=config) == "done"
        elapsed = time.perf_counter() - start

        rows = store.frame("verdicts", run_id, 1).to_dict("records")
        assert len(rows) == N_TASKS * K  # none lost
        assert {(r["task_id"], r["step"], r["k"]) for r in rows} == set(want)  # none duplicated or strayed
        attempts: Counter[int] = Counter()
        wrong, spurious = [], 0
        for r in rows:
            prompt, status, tries = want[(r["task_id"], r["step"], r["k"])]
            extra = json.loads(r["extra_json"])
            attempts[extra["attempts"]] += 1
            if r["status"] != status or not r["raw"]:
                wrong.append((r["task_id"], r["k"], script(prompt), r["status"], status, r["raw"][:120]))
            # Every request the server saw for this prompt is an attempt the client counted, and exactly as many
            # as the script needs, except a retry forced by a (rare) client-side timeout on a loaded machine.
            if extra["attempts"] != faults.seen[prompt] or not tries <= extra["attempts"] <= 1 + MAX_RETRIES:
                wrong.append((r["task_id"], r["k"], script(prompt), extra["attempts"], faults.seen[prompt], tries))
            spurious += extra["attempts"] > tries
            if r["status"] == "error":
                assert r["raw"].split(":")[0] in ERRORS, r["raw"]
        assert not wrong, wrong[:10]
        assert spurious <= 10, f"{spurious} verdicts needed retries the script did not ask for"
        statuses = Counter(r["status"] for r in rows)
        assert set(statuses) == {"accepted", "corrected", "unparsed", "truncated", "error"}
        sent = sum(faults.seen.values())
        assert 2 <= faults.max_in_flight <= 8  # critic.concurrency bounds the requests in flight
        assert sent == sum(n * c for n, c in attempts.items())
        cached = store.query("SELECT count(*) AS n FROM critic_cache WHERE model = 'soak-critic'").n[0]
        assert cached == statuses["accepted"] + statuses["corrected"] + statuses["unparsed"]
        print(f"\ncritic soak: {len(rows)} verdicts in {elapsed:.1f} s; {sent} requests ({sent - len(rows)} "
              f"retries, {spurious} of them unscripted); attempts per verdict {dict(sorted(attempts.items()))}; "
              f"faults served {dict(sorted(faults.served.items()))}; statuses {dict(sorted(statuses.items()))}; "
              f"at most {faults.max_in_flight} requests in flight")
