"""``Picker``: a ``gr.Dropdown`` whose choices the server replaces as the data moves (the run's iterations, a queue's
page of pairs or verdicts, a task's plans), and which takes a pick made under the previous choices.

Gradio checks a dropdown's value against the choices it last sent this session and fails the whole event with a
"Value: X is not in the list of choices" error toast when it is missing. With choices that move, two events in flight
make that routine: the curator presses ``j`` while the page's reload is still running, or picks iteration 1 while
iteration 0's empty queue is being sent, and the second event carries a pick that was valid a moment ago. The event
then failed, the pick stayed put and a red toast appeared. A ``Picker`` passes such a value on when it is a plain
value of the choices' kind (an int for integer choices, a short string for string ones), else None: the handlers
already check every key against the store (an unknown pair, verdict or iteration is refused by the engine, by name),
so the choice list is not the guard. The browser side is Gradio's own dropdown (``is_template``). Gradio writes
a typing stub, ``picker.pyi``, beside this file on import (any component subclass gets one); it is git-ignored.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

# Room for a key built from a long task id; a longer stale pick reads as None (nothing picked), as any odd value does.
MAX_TEXT = 2000
MAX_INT = 2**31 - 1  # DuckDB's INTEGER columns: a bigger number would fail the query, not just find nothing


def _kind_fits(value: Any, choices: list[Any]) -> bool:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return False
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return False
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:  # an iteration, a plan number: never this big
        return False
    kinds = {type(c) for c in choices if c is not None}
    return not kinds or type(value) in kinds


class Picker(gr.Dropdown):
    """A single-choice ``gr.Dropdown`` that passes a stale pick on (see the module docstring)."""

    is_template = True  # drawn by the browser as Gradio's "dropdown"

    def preprocess(self, payload: Any) -> Any:
        if payload is None or self.multiselect:
            return super().preprocess(payload)
        values = [value for _, value in self.choices]
        if payload in values:
            return super().preprocess(payload)
        return payload if _kind_fits(payload, values) else None

    def _warn_if_invalid_choice(self, value: Any) -> None:
        """Silent: a value outside the choices is this component's normal case (the session's copy of a picker keeps
        its last value when a reload sends only new choices), and Gradio's warning filled the server log."""
