"""A quick look at an ``openai`` critic's server before a run starts, and what a 404 from it may mean.

Contract: ``probe_caution(config)`` asks ``GET {critic.base_url}/models`` once (``PROBE_TIMEOUT_S``, no retry; the
answer kept ``PROBE_KEEP_S`` per server, model and key variable) and returns a caution or None, never raising;
``engine.preflight`` shows it before a run is created. ``base_url_hint(base_url)`` says what may be wrong with a
base URL the server answers 404 at (no ``/v1`` at its end, or the endpoint ``/chat/completions`` written into it);
the ``openai`` backend adds it to a 404's error verdict. The key is sent, never shown: a caution names only its
environment variable.
"""

from __future__ import annotations

import os
import re
import time
from urllib.parse import urlsplit

import openai

from engine.config import CriticSection

_VERSIONED = re.compile(r"/v\d+\w*$")  # /v1, /v1beta: where an OpenAI-compatible API usually lives


def base_url_hint(base_url: str) -> str | None:
    """What may be wrong with ``base_url`` when the server answers 404 (vLLM and Ollama serve the API under /v1 and
    answer 404 at the root; the client appends /chat/completions itself): None when its path looks right."""
    path = urlsplit(base_url).path.rstrip("/")
    if path.endswith("/completions"):
        kept = base_url.rstrip("/").rsplit("/chat/completions", 1)[0].rsplit("/completions", 1)[0]
        return f"critic.base_url ends in the endpoint, which the client appends itself: try {kept}"
    if not _VERSIONED.search(path):
        return f"critic.base_url does not end in /v1, where vLLM and Ollama serve it: try {base_url.rstrip('/')}/v1"
    return None


PROBE_TIMEOUT_S = 5.0
# An answer is kept this long per server, model and key variable: an experiment creates many runs of one critic, and
# a server that is down costs PROBE_TIMEOUT_S each time it is asked.
PROBE_KEEP_S = 60.0
_probed: dict[tuple[str, str, str, bool], tuple[float, str | None]] = {}


def probe_caution(config: CriticSection) -> str | None:
    """One quick look at the critic server before a run starts (``GET /models``, ``PROBE_TIMEOUT_S``, no retry): a
    caution when nothing answers at ``critic.base_url``, when it refuses the key, when it lists its models and
    ``critic.model`` is not among them, or when it answers 404 and ``base_url_hint`` is borne out (the URL holds the
    endpoint, or ``base_url/v1`` lists models); None when it answers as expected, or in a way that says nothing (a
    server without ``/models``). A caution, not an error: the server may be started before the critique stage runs,
    which at the paper's scale is hours later -- the wrong URL found then cost those hours."""
    secret = os.environ.get(config.api_key_env) if config.api_key_env else None
    key = (config.base_url, config.model, config.api_key_env, bool(secret))
    kept = _probed.get(key)
    if kept is not None and time.monotonic() - kept[0] < PROBE_KEEP_S:
        return kept[1]
    caution = _probe(config, secret)
    _probed[key] = (time.monotonic(), caution)
    return caution


def _probe(config: CriticSection, secret: str | None) -> str | None:
    client = openai.OpenAI(base_url=config.base_url, api_key=secret or "EMPTY",
                           timeout=min(PROBE_TIMEOUT_S, config.timeout_s), max_retries=0)
    where = f"critic.base_url = {config.base_url}"
    try:
        served = list(client.models.list())
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        return (f"{where}: nothing answers there now ({type(exc).__name__}); the critique stage will fail unless the "
                "server is up by then")
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        if secret:
            key = f"the key in ${config.api_key_env}"
        else:
            unset = f"${config.api_key_env} is unset" if config.api_key_env else "critic.api_key_env is empty"
            key = f"the placeholder key EMPTY ({unset})"
        return f"{where}: the server refused {key} ({exc.status_code}); the critique stage will fail with it"
    except openai.NotFoundError:  # no /models here: a server without one, or a base_url without its /v1
        return _hint_caution(config, secret)
    except Exception:  # another status, a body that is no list: nothing to conclude
        return None
    ids = [model.id for model in served]
    # Ollama lists "llama3:latest" for "llama3"; llama.cpp lists its GGUF file and answers to any model name.
    known = config.model in ids or f"{config.model}:latest" in ids or any(
        getattr(model, "owned_by", None) == "llamacpp" for model in served)
    if ids and not known:
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        return f"critic.model = {config.model}: the server at {config.base_url} serves {shown}, not this model"
    return None


def _hint_caution(config: CriticSection, secret: str | None) -> str | None:
    """A caution when ``base_url_hint`` applies and is borne out: the URL names the endpoint itself, or the server
    lists its models under ``base_url/v1`` (llama.cpp serves the API at its root as well, and answers there)."""
    hint = base_url_hint(config.base_url)
    if hint is None:
        return None
    if not urlsplit(config.base_url).path.rstrip("/").endswith("/completions"):
        client = openai.OpenAI(base_url=config.base_url.rstrip("/") + "/v1", api_key=secret or "EMPTY",
                               timeout=min(PROBE_TIMEOUT_S, config.timeout_s), max_retries=0)
        try:
            client.models.list()
        except Exception:
            return None
    return f"critic.base_url = {config.base_url}: the server answers 404 there ({hint})"
