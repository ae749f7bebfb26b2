"""What every tool of the action language returns or raises (maths, QA and web tools share it).

Contract: a tool returns a ``ToolResult`` (one value per output, an optional note) or raises ``ToolError`` with a
message for the user; the executor records either as the step's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ToolError(Exception):
    """A tool could not run on its input; the message is shown to the user."""


@dataclass
class ToolResult:
    values: tuple[Any, ...]  # one per output; a single-output tool returns a 1-tuple
    note: str | None = None

