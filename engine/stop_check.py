"""A stop request that long batch loops honour without every caller passing it down.

Contract: ``stop_checked(check)`` is a context manager that makes ``check`` (a callable that raises to stop, such as
``engine.stages.context.StageContext.check_stop``) the current thread's stop check for the block; ``between_batches()``
calls the current check, if any, and does nothing otherwise. The generation and scoring loops (``engine.generation``,
``engine.scoring``, the shared-prefix walk of ``engine.prefix_cache``) call ``between_batches()`` before each batch, so
a stage that runs them inside ``stop_checked`` stops within one batch of a request; outside one (a benchmark, ``python
-m engine eval``) nothing changes. A ``ContextVar``: each thread (the studio's job worker, a request thread) sees only
its own check.

Why: the evaluate stage runs one ``evaluate`` call over every task (planning, grounding and the gold-action scores)
and records nothing until it returns, so a Stop or a first Ctrl-C waited for the whole evaluation -- a minute on the
demo, many on a real model. Stopping inside it loses only that evaluation, which a resume runs again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CHECK: ContextVar[Callable[[], None] | None] = ContextVar("moat_stop_check", default=None)


@contextmanager
def stop_checked(check: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``between_batches()`` calls ``check`` (which raises to stop)."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def between_batches() -> None:
    """Call the current thread's stop check, if a ``stop_checked`` block set one."""
    check = _CHECK.get()
    if check is not None:
        check()
