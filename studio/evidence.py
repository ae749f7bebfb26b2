"""The evidence behind a pair, as HTML: the gold actions coloured by the grounder's per-token surprisal under the
chosen and the rejected plan (``engine.surprisal``), and where the two differ most.

Contract: ``pair_evidence_html(store, service, run_id, iteration, task_id, step, chosen_k, rejected_k)`` returns one
HTML block (or a one-line message saying why there is none: the checkpoint is gone, the plan is not stored). Each
token is a ``<span>`` whose red intensity grows with its surprisal (nats, capped at ``CAP`` for the colour) and whose
``title`` holds the exact value; the mean of each row is the plan's log-PPL as the score stage stored it. The tokens
where the rejected plan loses the grounder most are listed with how much more surprising each is under it than
under the chosen plan, in nats (``+10.09 nats``). Rendering only: the numbers come from ``SurprisalService``.
"""

from __future__ import annotations

import html

from engine.store import Store
from engine.surprisal import PlanSurprisal, SurprisalService, SurprisalUnavailable

CAP = 6.0  # nats at which the colour saturates (~1 in 400)


def _token_row(found: PlanSurprisal, label: str, other: PlanSurprisal | None = None) -> str:
    spans = []
    for i, (token, nll) in enumerate(zip(found.tokens, found.nll)):
        alpha = min(nll, CAP) / CAP
        extra = ""
        if other is not None and i < len(other.nll):
            extra = f"; {nll - other.nll[i]:+.2f} vs chosen"
        shown = html.escape(token.replace("\n", "⏎")) or "∅"
        spans.append(f"<span class='moat-tok' title='{nll:.3f} nats{extra}' "
                     f"style='background:rgba(220,40,40,{alpha:.2f});border-radius:3px;padding:0 1px'>{shown}</span>")
    stored = "" if found.stored_logppl is None else f" (stored {found.stored_logppl:.4f})"
    return (f"<div style='margin:6px 0'><b>{label}</b> · mean surprisal {found.mean:.4f}{stored}"
            f"<div style='font-family:monospace;white-space:pre-wrap;line-height:1.8'>{''.join(spans)}</div></div>")


def _worst_tokens(chosen: PlanSurprisal, rejected: PlanSurprisal, n: int = 3) -> str:
    """The tokens whose surprisal rose most from the chosen to the rejected plan (same gold tokens, same order)."""
    deltas = sorted(((r - c, i) for i, (c, r) in enumerate(zip(chosen.nll, rejected.nll))), reverse=True)[:n]
    parts = [f"<code>{html.escape(chosen.tokens[i].strip() or repr(chosen.tokens[i]))}</code> {d:+.2f} nats"
             for d, i in deltas if d > 0]
    # The unit and the baseline are said: bare "+10.09" beside a token read as a score of unknown scale.
    return ("Where the grounder gets lost under the rejected plan (each token's surprisal under it minus under the "
            "chosen plan, in nats): " + ", ".join(parts)) if parts else (
        "The rejected plan raises no token's surprisal.")


def pair_evidence_html(store: Store, service: SurprisalService, run_id: str, iteration: int, task_id: str, step: int,
                       chosen_k: int, rejected_k: int) -> str:
    try:
        chosen = service.plan(store, run_id, iteration, task_id, step, chosen_k)
        rejected = service.plan(store, run_id, iteration, task_id, step, rejected_k)
    except SurprisalUnavailable as exc:
        return f"<p class='moat-evidence-missing'>No evidence: {html.escape(str(exc))}.</p>"
    return ("<div class='moat-evidence'>"
            f"<p>Gold actions, each token shaded by the grounder's surprisal (darker = less expected; hover for the "
            f"value). Grounder: <code>{html.escape(chosen.grounder)}</code></p>"
            + _token_row(chosen, f"under the chosen plan (k={chosen_k})")
            + _token_row(rejected, f"under the rejected plan (k={rejected_k})", chosen)
            + f"<p>{_worst_tokens(chosen, rejected)}</p></div>")
