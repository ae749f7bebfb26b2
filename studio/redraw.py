"""``only_changed(drawn, parts) -> (outputs, signatures)``: a polling refresh sends what changed since it last drew
and ``gr.skip()`` for the rest.

A ``gr.Timer`` refresh that re-sends an unchanged Plotly chart or table makes the browser draw it again on every
tick. The Run tab's 2 s refresh did so for its loss chart, stage table, pipeline and job log whether or not anything
had changed: an idle page kept a Chromium renderer busy, and on a 2-core machine a curator's key press on another tab
waited behind those redraws (a ``j`` that took more than 15 s in CI). The refresh keeps, per session, the signatures
of what it last sent (a ``gr.State``) and builds and sends only the parts whose signature differs.

``signature(value)`` is a short digest of a value as it would be drawn (a DataFrame by its CSV, anything else by its
``repr``). A part whose value is costly to build (the loss chart) passes a cheap signature of its inputs and a
function that builds it, called only when that signature is new.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr
import pandas as pd


def signature(value: Any) -> str:
    """A digest of ``value`` as drawn: equal values give equal signatures. A DataFrame counts whole (its ``repr``
    elides the middle rows), also inside a tuple or list."""
    if isinstance(value, (tuple, list)):
        text = "\x1f".join(signature(v) for v in value)
    elif isinstance(value, pd.DataFrame):
        text = value.to_csv(index=False)
    else:
        text = repr(value)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def only_changed(drawn: Sequence[str] | None,
                 parts: Sequence[tuple[str, Callable[[], Any]]]) -> tuple[list[Any], list[str]]:
    """``(outputs, signatures)`` for ``parts`` (``(signature, build)`` each, in output order): ``build()`` where the
    signature differs from the one in ``drawn`` at the same place (``drawn`` None: nothing drawn yet in this
    session, so everything is built), ``gr.skip()`` where it is the same."""
    signatures = [sig for sig, _ in parts]
    old = list(drawn) if isinstance(drawn, (list, tuple)) and len(drawn) == len(parts) else None
    outputs = [build() if old is None or old[i] != sig else gr.skip() for i, (sig, build) in enumerate(parts)]
    return outputs, signatures


def computed(value: Any) -> tuple[str, Callable[[], Any]]:
    """A part whose value is already built: signed by the value itself."""
    return signature(value), lambda: value
