"""Who may curate a run (the Pairs and Critic tabs' decisions: tie, drop, restore, choose, looks right, accept, edit,
undo), and what the tabs say to a page that may not.

Everywhere: ``studio.common.check_writable``'s rule (not in a read-only studio, not for a viewer account). On a
Hugging Face Space (``Ctx.spaces``) also: a page curates only the runs its browser created (``studio.run_owners``,
recorded by *Start a new run*; a reload keeps them), as it may stop only the job its browser started
(``studio.jobs.JobWorker.own_jobs_only``). Every visitor is
anonymous there and types any curator name, so without it one visitor could override the shared demo run's pairs and
verdicts, which every later visitor lands on, or another visitor's, which a later iteration of that run trains on. The
first-visit showcase run and other visitors' runs are read-only there; in a team studio nothing changes.

``check_curation`` is the server-side guard every curation handler calls first (a raw API call is refused too: the
page's switched-off buttons are cosmetic); ``may_curate`` switches the buttons; ``read_only_notice`` is the tabs'
line saying why the run is read-only and what to do instead (start your own run), also the refusal's text;
``guarded_undo`` puts the guard in front of an undo handler (``studio.keys.undo_handler``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from engine.store import Store
from studio.common import Ctx, can_write, check_writable, session_of, user_error
from studio.first_visit import CAPPED_DURATION, showcase_run

# What a curator does on each tab, for the notice's "To ... yourself".
CURATING = {"pair": "tie, drop or restore pairs", "verdict": "accept, edit or drop verdicts"}
START_OWN = ("To {doing} yourself, start your own run: *Start a new run* on the **Run** tab ({duration} at this "
             "Space's sizes). This page can curate the runs it starts.")


def _owns(ctx: Ctx, run_id: str | None, request: gr.Request | None) -> bool:
    """The ownership rule alone: outside a Space every page owns every run; on a Space, the runs it created."""
    return not ctx.spaces or (bool(run_id) and ctx.jobs.owners.created_by(run_id, session_of(request)))


def _refusal(ctx: Ctx, run_id: str | None, request: gr.Request | None, target: str) -> str | None:
    """Why this page may not curate ``run_id`` (``target`` pair | verdict names what), else None: only ever on a
    Space (``_owns``)."""
    if _owns(ctx, run_id, request):
        return None
    if not run_id:
        return "Pick a run first."
    start_own = START_OWN.format(doing=CURATING[target], duration=CAPPED_DURATION)
    if run_id == _showcase(ctx.store):
        return ("**Read-only: this is the Space's demo run**, the one every visitor lands on, so nobody changes it "
                f"here. {start_own}")
    return ("**Read-only: this run was not started from this browser** (another visitor's, or one from before a "
            f"restart of the Space): on this Space a browser curates only the runs it starts, so no visitor changes "
            f"what another sees or trains on. {start_own}")


def _showcase(store: Store) -> str | None:
    return showcase_run(store.list_runs())  # the oldest run of its name: a visitor's run may be named alike


def check_curation(ctx: Ctx, run_id: str | None, request: gr.Request | None, target: str) -> None:
    """Refuse a curation of ``run_id`` (``target`` pair | verdict) from this request: ``check_writable``'s refusals,
    then on a Space a run this page did not create (``user_error``, the notice's words as a toast)."""
    check_writable(ctx, request)
    refused = _refusal(ctx, run_id, request, target)
    if refused:
        raise user_error(refused)


def may_curate(ctx: Ctx, run_id: str | None, request: gr.Request | None) -> bool:
    """Whether this session may curate ``run_id`` (``check_curation``'s rule), for switching the write buttons:
    cosmetic, the handlers check again."""
    return can_write(ctx, request) and _owns(ctx, run_id, request)


def read_only_notice(ctx: Ctx, run_id: str | None, request: gr.Request | None, target: str) -> Any:
    """The tab's line under its picker: on a Space, why this page may not curate ``run_id`` and what to do
    instead (``""`` for a run it created, or no run picked); ``gr.skip()`` outside a Space, where the line stays
    empty and nothing is sent."""
    if not ctx.spaces:
        return gr.skip()
    return (_refusal(ctx, run_id, request, target) or "") if run_id else ""


def guarded_undo(ctx: Ctx, handler: Callable[..., str], target: str) -> Callable[..., str]:
    """``handler`` (``studio.keys.undo_handler``'s ``(run_id, it, name, request)``) behind ``check_curation``: an undo
    changes what a run trains on as much as a decision does, and the curator name it undoes for is typed freely."""
    def on_undo(run_id, it, name, request: gr.Request) -> str:
        check_curation(ctx, run_id, request, target)
        return handler(run_id, it, name, request)
    return on_undo
