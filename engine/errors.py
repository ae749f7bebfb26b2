"""Errors the engine raises for bad input.

``DataError`` always names where the problem is (``path:line: field: what is wrong``) so a user can fix the file;
loaders raise it instead of bare ``KeyError``/``JSONDecodeError`` and never return a partial result. A record of a
JSON array document is located by an ``ArrayLine``, which also names the record (``path:12 (record 3): ...``), since
on a single-line array every record is on line 1. ``ConfigError`` names a config field (``sample.k``);
``CheckpointError`` is the ``ConfigError`` for a model path that cannot be used. ``StageStopped`` is not bad input: a
stage raises it when the user pressed stop (the loop records the stage as stopped).
"""

from __future__ import annotations


class ArrayLine(int):
    """The 1-based line a record of a JSON array document starts on (an ``int``, so every loader helper takes it as a
    line), carrying the record's 1-based position in the array, ``record``."""

    record: int

    def __new__(cls, line: int, record: int) -> ArrayLine:
        self = super().__new__(cls, line)
        self.record = record
        return self

    def __getnewargs__(self) -> tuple[int, int]:  # pickle and copy rebuild it with its record
        return int(self), self.record


def line_text(line: int) -> str:
    """``"12"``, or ``"12 (record 3)"`` for an ``ArrayLine``."""
    return f"{int(line)} (record {line.record})" if isinstance(line, ArrayLine) else str(line)


class DataError(ValueError):
    """Bad input data, located by file path, 1-based line number (an ``ArrayLine`` in an array file) and field."""

    def __init__(self, path: str, line: int | None, field: str, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = f"{self.path}:{line_text(line)}" if line is not None else self.path
        super().__init__(f"{where}: {field}: {message}")


class ConfigError(ValueError):
    """A bad configuration value, named by its dotted field path (``section.field``)."""

    def __init__(self, field: str, message: str, source: str | None = None):
        self.field, self.message, self.source = field, message, source
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}{field}: {message}")


class CheckpointError(ConfigError):
    """A model, tokenizer or adapter a config field points to cannot be used (found by ``engine.preflight``).

    A ``ConfigError`` so every caller that reports bad configs (CLI exit code 2, the studio) reports it too; ``field``
    is the config field (``planner.path``) or ``<tokenizer>`` when raised outside a run.
    """


class UnknownRun(KeyError):
    """A run id the store does not hold; the message (``Store.unknown_run``) names the ids it was likely meant to
    be. A ``KeyError`` for the callers that catch one, printed without the quotes ``KeyError`` puts around its key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StoreError(RuntimeError):
    """The store cannot be opened or used as asked."""


class StoreLockedError(StoreError):
    """The DuckDB file is held by another process."""


class StoreVersionError(StoreError):
    """The file was written by a newer schema version than this engine knows."""


class StageStopped(Exception):
    """Raised inside a stage when the stop flag is seen between batches; the loop records status 'stopped'."""


def mark_stage_failed(exc: BaseException, iteration: int, stage: str) -> None:
    """Note on ``exc`` that it failed the stage ``stage`` of ``iteration`` (recorded ``failed`` in the store), so a
    caller tells a stage's failure (exit 1, resumable) from bad input or a bug before any stage ran. An attribute,
    not a wrapper: the studio, experiments and tests catch the stage's own exception types."""
    exc.moat_failed_stage = (iteration, stage)  # type: ignore[attr-defined]


def failed_stage(exc: BaseException) -> tuple[int, str] | None:
    """``(iteration, stage)`` when ``exc`` failed a recorded stage (``mark_stage_failed``), else None."""
    return getattr(exc, "moat_failed_stage", None)
