"""The critic interface: what the ``critique`` stage hands a critic and what it gets back.

A critic judges ``Grounding`` items (a task, the plan's subgoals, the grounder's actions and their execution) and
returns one ``Verdict`` per item, in order, never raising for a single bad item: failures are verdicts too
(``unparsed``, ``truncated``, ``error``). ``reference_guided`` marks verdicts decided by gold annotations rather
than by a model, so they are never passed off as an LLM's judgement.

A grounding's ``execution["error"]`` and ``execution["answer"]`` are a string or None, never NaN: the stage reads
them from store rows through pandas, which fills a missing text cell with NaN (truthy, and shown as "nan").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.dbutil import isna
from engine.tasks import Task

STATUSES = ("accepted", "corrected", "unfixable", "unparsed", "truncated", "error")


@dataclass
class Grounding:
    task: Task
    step: int  # 0 = onetime plan; k >= 1 = iterative planning step
    k: int  # which sampled plan
    subgoals: list[str]
    actions: str
    execution: dict[str, Any]  # ExecutionResult.to_dict()
    correct: bool  # executed to the gold answer (or gold step result)

    def __post_init__(self) -> None:
        # Every critic reads these with ``if execution.get("error")``: a missing cell must be None, not NaN/NA.
        self.execution = {**self.execution, **{key: None for key in ("error", "answer")
                                                 if isna(self.execution.get(key))}}


@dataclass
class Verdict:
    status: str  # one of STATUSES
    backend: str
    model: str | None = None
    reference_guided: bool = False
    raw: str = ""  # the critic's raw text (or the reference critic's explanation)
    corrected_subgoals: list[str] | None = None
    corrected_actions: str | None = None
    latency_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Critic(Protocol):
    name: str

    def judge(self, items: list[Grounding]) -> list[Verdict]: ...
