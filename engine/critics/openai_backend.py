"""The ``openai`` critic: any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp, ...).

Contract: ``OpenAICritic(config, store=None).judge(items)`` returns one ``Verdict`` per item, in order, and never
raises for an item: any failure becomes ``Verdict(status="error", raw="<ExceptionType>: <message>")``.

* Requests: ``critic_messages(item)`` sent with explicit ``max_tokens`` (vLLM otherwise stops after 16 tokens),
  ``temperature`` and ``top_p``; a server that insists on ``max_completion_tokens`` gets that name instead.
* Key: only the *name* of its environment variable is configured (``critic.api_key_env``); the value is read at
  construction (``"EMPTY"`` when unset, which local servers accept), sent as the Bearer header and masked out of
  every raw text; it is never written to the store or the logs.
* Retries: our own loop (the client's is off): 429, 5xx, timeouts (ours, or a proxy's 408) and connection errors are
  retried up to ``max_retries`` times (``1 + max_retries`` requests at most), any other 4xx and malformed bodies
  never. The wait is the server's ``Retry-After`` (seconds or HTTP date; also ``retry-after-ms``), capped at
  ``retry_after_max_s``, else exponential backoff ``backoff_base_s * 2**attempt`` (capped at ``backoff_max_s``)
  with jitter in [0.5, 1] of it.
* Concurrency: at most ``critic.concurrency`` requests in flight (a thread pool per ``judge`` call); identical
  prompts in one call are sent once.
* Cache: ``critic_cache(model, prompt_sha256, response_json)``, keyed by the model name and the SHA-256 of the
  messages' JSON with the sampling settings (temperature, top_p, max_tokens: a run at another temperature asks
  again). Replies that completed (not ``error``, not ``truncated``) are cached, so a re-run never pays for them
  twice; a hit gives ``latency_s=0`` and ``extra["cache"]="hit"`` (token counts are the original reply's). The key
  ignores ``base_url``: the same model name on two servers shares entries. ``critic.cache = false`` reads no entry
  (every prompt is asked; replies are still stored, so a later run may reuse them).
* Per verdict: ``backend="openai"``, ``model``, ``latency_s`` (the item's wall time, retries included),
  ``prompt_tokens``/``completion_tokens`` from ``usage``, ``finish_reason``, ``status``; ``extra`` has
  ``cache`` (hit/miss), ``attempts`` and, when unparsed, ``parse_error``; an error verdict's ``extra`` has
  ``unreachable`` (``is_unreachable``): true when the server was never reached or refused every request of its kind
  (connection, timeout, 401/403/404, 408, 429 or 5xx after the retries), false when it answered this item with a
  refusal of the item itself (400, 422, a malformed body); and ``malformed`` (``is_malformed``): the reply was no
  chat completion (its ``raw`` shows the body). A 404's ``raw`` starts with ``engine.critics.probe.base_url_hint``
  when the base URL lacks its ``/v1`` or holds the endpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

import openai

from engine.config import CriticSection
from engine.critics.base import Grounding, Verdict
from engine.critics.parsing import parse_response
from engine.critics.probe import base_url_hint, probe_caution  # noqa: F401 -- preflight's import
from engine.critics.prompts import Message, critic_messages

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 60.0
UNCACHED = ("error", "truncated")


class MalformedResponse(RuntimeError):
    """A 2xx reply that is not a chat completion (not JSON, no choices, no message)."""


@dataclass
class Reply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Reply:
        data = json.loads(text)
        return cls(data.get("text") or "", data.get("finish_reason"), data.get("prompt_tokens"),
                   data.get("completion_tokens"))


def prompt_key(messages: list[Message], sampling: dict[str, Any] | None = None) -> str:
    """SHA-256 of the request's canonical JSON: its messages and the ``sampling`` settings that shape the reply
    (temperature, top_p, max_tokens); the cache key next to the model name. Without ``sampling``: the key entries
    had before it held the settings (the messages' JSON alone)."""
    request: Any = messages if sampling is None else {"messages": messages, "sampling": sampling}
    payload = json.dumps(request, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def retry_after_s(headers: Any) -> float | None:
    """Seconds a ``Retry-After``/``retry-after-ms`` header asks for (None when absent or unreadable)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_retryable(exc: BaseException) -> bool:
    """429, 5xx, timeouts and connection errors; never another 4xx or a malformed body. A 408 is a timeout too: a
    proxy in front of a slow server (nginx, a load balancer) answers it when the generation outlasts its own limit,
    and the same request then usually succeeds, as after our own timeout (it was the item's error verdict). A 429
    saying the account is out of quota (OpenAI's ``insufficient_quota``) is not retried: no wait ends it, and each
    retry of a batch waited its backoff for nothing before the stage failed anyway (it is ``is_unreachable``)."""
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429 and getattr(exc, "code", None) == "insufficient_quota":
            return False
        return exc.status_code in (408, 429) or exc.status_code >= 500
    return isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError))


def is_unreachable(exc: BaseException) -> bool:
    """Whether a final failure says the critic cannot be used at all (a wrong URL, key or model name, a server down
    or out of quota), not that it refused this one item (400 context too long, 422, a malformed body): the critique
    stage fails on a batch of the former and stores the latter as the item's ``error`` verdict."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (401, 403, 404, 408, 429) or exc.status_code >= 500
    return isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError))


def is_refused(exc: BaseException) -> bool:
    """Whether the server refused the request as invalid (400, 422): one such refusal is about its item (a prompt too
    long), a whole batch of them about the request every item shares (``critic.max_tokens`` beyond the served context,
    a ``temperature`` the model does not take), which the critique stage fails on as on an unreachable critic."""
    return isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422)


def is_malformed(exc: BaseException) -> bool:
    """Whether the server answered with something that is no chat completion (not JSON, no choices, no message): one
    such reply is the item's error, a whole batch of them a server that is not an OpenAI-compatible one (another
    service on the port, a proxy's page), which the critique stage fails on as on an unreachable one."""
    return isinstance(exc, (MalformedResponse, json.JSONDecodeError))


class OpenAICritic:
    name = "openai"

    def __init__(self, config: CriticSection, store: Any = None, *, backoff_base_s: float | None = None,
                 backoff_max_s: float | None = None, retry_after_max_s: float | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        """Backoff settings default to the module's ``BACKOFF_BASE_S``/``BACKOFF_MAX_S``/``RETRY_AFTER_MAX_S``."""
        self.config, self.store = config, store
        self.backoff_base_s = BACKOFF_BASE_S if backoff_base_s is None else backoff_base_s
        self.backoff_max_s = BACKOFF_MAX_S if backoff_max_s is None else backoff_max_s
        self.retry_after_max_s = RETRY_AFTER_MAX_S if retry_after_max_s is None else retry_after_max_s
        self._sleep = sleep
        self._secret = os.environ.get(config.api_key_env) if config.api_key_env else None
        self._token_param = "max_tokens"
        self.client = openai.OpenAI(base_url=config.base_url, api_key=self._secret or "EMPTY",
                                    timeout=config.timeout_s, max_retries=0)

    # -- judge ------------------------------------------------------------------------------------------------
    def judge(self, items: list[Grounding]) -> list[Verdict]:
        verdicts: list[Verdict | None] = [None] * len(items)
        try:
            self._judge_into(items, verdicts)
        except Exception as exc:  # a bug here must not crash the stage: the items left get an error verdict
            log.exception("critic batch failed")
            verdicts = [v if v is not None else self._error(exc, 0.0, 0) for v in verdicts]
        return [v if v is not None else self._error(RuntimeError("no verdict"), 0.0, 0) for v in verdicts]

    def _judge_into(self, items: list[Grounding], verdicts: list[Verdict | None]) -> None:
        keyed: dict[str, list[int]] = {}
        messages: dict[str, list[Message]] = {}
        for i, item in enumerate(items):
            try:
                msgs = critic_messages(item)
            except Exception as exc:  # e.g. an unknown domain: this item only
                verdicts[i] = self._error(exc, 0.0, 0)
                continue
            key = prompt_key(msgs, {"temperature": self.config.temperature, "top_p": self.config.top_p,
                                    "max_tokens": self.config.max_tokens})
            keyed.setdefault(key, []).append(i)
            messages[key] = msgs
        cached = self._cache_get(list(keyed), messages)
        for key, reply in cached.items():
            for i in keyed[key]:
                verdicts[i] = self._verdict(reply, 0.0, 0, "hit")
        misses = [key for key in keyed if key not in cached]
        for key, verdict in self._fetch_all(misses, messages):
            for i in keyed[key]:  # identical prompts share one request, each item gets its own copy
                verdicts[i] = replace(verdict, extra=dict(verdict.extra))

    def _fetch_all(self, keys: list[str], messages: dict[str, list[Message]]):
        """Yield ``(key, verdict)`` as requests finish, at most ``concurrency`` in flight; cache good replies."""
        if not keys:
            return
        pool = ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(keys)))
        try:
            futures = {pool.submit(self._fetch, messages[key]): key for key in keys}
            for future in as_completed(futures):
                key = futures[future]
                verdict, reply = future.result()  # _fetch never raises
                if reply is not None and verdict.status not in UNCACHED:
                    self._cache_put(key, reply)
                yield key, verdict
        except BaseException:
            # A second Ctrl-C (KeyboardInterrupt) or a stop: drop the requests not started. A `with` block's exit
            # waited for every submitted request, up to timeout x retries each, before the interrupt got through.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _fetch(self, messages: list[Message]) -> tuple[Verdict, Reply | None]:
        start = time.perf_counter()
        reply, failure, attempts = self._request_with_retries(messages)
        if failure is not None:
            return self._error(failure, time.perf_counter() - start, attempts), None
        return self._verdict(reply, time.perf_counter() - start, attempts, "miss"), reply

    # -- one request, retried -----------------------------------------------------------------------------------
    def _request_with_retries(self, messages: list[Message]) -> tuple[Reply | None, Exception | None, int]:
        """``(reply, None, attempts)`` or ``(None, last exception, attempts)``; at most 1 + max_retries tries."""
        attempt = 0
        while True:
            try:
                return self._request(messages), None, attempt + 1
            except Exception as exc:
                if attempt >= self.config.max_retries or not is_retryable(exc):
                    return None, exc, attempt + 1
                delay = self._delay(exc, attempt)
                log.warning("critic request failed (%s); retry %d/%d in %.2fs", self._describe(exc), attempt + 1,
                            self.config.max_retries, delay)
                self._sleep(delay)
                attempt += 1

    def _delay(self, exc: BaseException, attempt: int) -> float:
        response = getattr(exc, "response", None)
        asked = retry_after_s(getattr(response, "headers", None)) if isinstance(exc, openai.APIStatusError) else None
        if asked is not None:
            return min(asked, self.retry_after_max_s)
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** attempt) * random.uniform(0.5, 1.0)

    def _request(self, messages: list[Message]) -> Reply:
        kwargs = {"model": self.config.model, "messages": messages, "temperature": self.config.temperature,
                  "top_p": self.config.top_p, self._token_param: self.config.max_tokens}
        try:
            completion = self.client.chat.completions.create(**kwargs)
        except openai.BadRequestError as exc:
            if self._token_param == "max_tokens" and "max_completion_tokens" in str(exc):
                self._token_param = "max_completion_tokens"  # newer OpenAI models refuse max_tokens
                return self._request(messages)
            raise
        reply = self._reply(completion)
        reply.text = self._redact(reply.text)  # a server echoing the key must not put it in the cache
        return reply

    @staticmethod
    def _reply(completion: Any) -> Reply:
        choices = getattr(completion, "choices", None)
        if not choices:
            # The body itself, not its type: a proxy's 200 {"error": {"message": ...}} read "'ChatCompletion'", and
            # its message is the one clue to why (the whole batch failing the stage said nothing more).
            dump = getattr(completion, "model_dump_json", None)
            shown = dump(exclude_none=True) if dump else completion
            raise MalformedResponse(f"no choices in the reply: {str(shown)[:200]!r}")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise MalformedResponse("the first choice has no message")
        usage = getattr(completion, "usage", None)
        # A lone UTF-16 surrogate (a "\\ud800" escape without its pair, which JSON allows) is no text: the cache file
        # and the store could not write it and the batch failed. It becomes "?", as any undecodable text would.
        text = message.content or ""
        if not text and getattr(message, "refusal", None):  # OpenAI's safety refusal: no content, the reason here
            text = f"(refused by the model) {message.refusal}"
        text = text.encode("utf-8", "replace").decode("utf-8")
        return Reply(text, getattr(choice, "finish_reason", None),
                     getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))

    # -- verdicts -----------------------------------------------------------------------------------------------
    def _verdict(self, reply: Reply, latency: float, attempts: int, cache: str) -> Verdict:
        fields = parse_response(reply.text, reply.finish_reason)
        fields["raw"] = self._redact(fields["raw"])
        fields["extra"].update(cache=cache, attempts=attempts)
        return Verdict(backend=self.name, model=self.config.model, latency_s=latency,
                       prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens, **fields)

    def _error(self, exc: BaseException, latency: float, attempts: int) -> Verdict:
        return Verdict("error", self.name, model=self.config.model, raw=self._describe(exc), latency_s=latency,
                       extra={"cache": "miss", "attempts": attempts, "unreachable": is_unreachable(exc),
                              "malformed": is_malformed(exc), "refused": is_refused(exc)})

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):  # 401, 403: which key went
            env = self.config.api_key_env
            if self._secret:
                text += f" (the key in ${env}, critic.api_key_env, was refused)"
            else:
                unset = f"${env} is unset" if env else "critic.api_key_env is empty"
                text += f" ({unset}, so the placeholder key EMPTY was sent)"
        if isinstance(exc, openai.NotFoundError) and (hint := base_url_hint(self.config.base_url)):
            # First, as the stage's failure shows only 300 characters (a proxy's 404 page is longer); a bare
            # "Error code: 404" did not say that the URL lacked its /v1.
            text = f"{type(exc).__name__} ({hint}): {exc}"
        return self._redact(text)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret and text else text

    # -- cache --------------------------------------------------------------------------------------------------
    def _cache_get(self, keys: list[str], messages: dict[str, list[Message]]) -> dict[str, Reply]:
        """The stored replies of ``keys``. Entries stored before the key held the sampling settings (keyed by the
        messages alone) are read too while the settings are the defaults, as nearly every such entry was made: an
        upgrade does not pay for a whole critique again."""
        if self.store is None or not keys or not self.config.cache:
            return {}
        legacy = {prompt_key(messages[key]): key for key in keys} if self._default_sampling() else {}
        asked = [*keys, *legacy]
        marks = ", ".join("?" for _ in asked)
        try:
            frame = self.store.query(f"SELECT prompt_sha256, response_json FROM critic_cache WHERE model = ? AND "
                                     f"prompt_sha256 IN ({marks})", [self.config.model, *asked])
        except Exception as exc:  # a broken cache only costs money, never the stage
            log.warning("critic cache lookup failed: %s", exc)
            return {}
        found = {row.prompt_sha256: row.response_json for row in frame.itertuples(index=False)}
        replies = {key: Reply.from_json(found[key]) for key in keys if key in found}
        for old, key in legacy.items():
            if key not in replies and old in found:
                replies[key] = Reply.from_json(found[old])
        return replies

    def _default_sampling(self) -> bool:
        defaults = CriticSection()
        return (self.config.temperature, self.config.top_p, self.config.max_tokens) == (
            defaults.temperature, defaults.top_p, defaults.max_tokens)

    def _cache_put(self, key: str, reply: Reply) -> None:
        if self.store is None:
            return
        try:
            self.store.write("critic_cache", [{"model": self.config.model, "prompt_sha256": key,
                                               "response_json": reply.to_json()}])
        except Exception as exc:
            log.warning("critic cache write failed: %s", exc)
