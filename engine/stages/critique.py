"""Stage ``critique``: a critic judges every grounding of the iteration (the ground stage grounded only the plans
``ground.which`` selects for judging: the lowest-PPL plan per task-step, the top n, or all distinct plans).

The critic comes from ``critic.backend`` (``engine.critics.make_critic``); the stage stores one ``verdicts`` row per
judged grounding with its backend, model, status, raw text, correction, latency and token usage. A resumed stage judges
only the chunks that hold a grounding without a verdict. A chunk the critic could not judge at all (every verdict an
``error`` with ``extra["unreachable"]``: the server down, a wrong URL, key or model, out of quota; or, in a chunk of
several, every reply no chat completion: another kind of server on the URL; or every request refused as invalid,
400/422: a setting every request shares, such as ``critic.max_tokens`` beyond the served context) fails the stage and
is not stored, so the stage reads failed instead of done with nothing to train on, and a resume judges the chunk again.
An error about one item (a prompt too long, a malformed reply, among good ones or judged again alone) is that item's
verdict, stored as before: it would fail again on every resume. ``python -m engine step critique --retry-errors``
removes an iteration's error verdicts (before its grounder trains on the verdicts) and runs this stage again, which
judges those groundings alone.
"""

from __future__ import annotations

import json
import shlex

from engine.critics import make_critic
from engine.critics.base import Grounding
from engine.stages.context import StageContext, batches, pending_batches


def groundings_to_judge(ctx: StageContext):
    sql = ("SELECT g.*, p.subgoals_json FROM groundings g JOIN plans p USING (run_id, iteration, task_id, step, k) "
           "WHERE g.run_id = ? AND g.iteration = ? ORDER BY task_id, step, k")
    return ctx.store.query(sql, [ctx.run_id, ctx.iteration])


def run(ctx: StageContext) -> dict[str, int]:
    critic = make_critic(ctx.config.critic, ctx.store, seed=ctx.config.run.seed * 1_009 + ctx.iteration)
    judged = ctx.store.keys_done("verdicts", ctx.run_id, ctx.iteration, ("task_id", "step", "k"))
    rows_in = list(groundings_to_judge(ctx).itertuples(index=False))
    tasks = {t.id: t for t in ctx.store.get_tasks(ctx.run_id)}
    written = 0
    # Chunks are cut from all the groundings to judge, so a resumed stage sends the critic the batches (and, for
    # the hf critic, the seeded generations) of an uninterrupted run.
    size = max(8, ctx.config.critic.concurrency * 4)
    chunks = pending_batches(rows_in, size, lambda r: (r.task_id, r.step, r.k) in judged)
    n_chunks = len(batches(rows_in, size))
    for index, chunk in chunks:
        ctx.check_stop()
        # A chunk is stored in one transaction, so on a resume none of it is judged; only error verdicts removed for
        # judging again (`step critique --retry-errors`) leave part of one, and the rest keeps the verdicts it had.
        whole = len(chunk)
        chunk = [r for r in chunk if (r.task_id, r.step, r.k) not in judged]
        if not chunk:  # pending_batches yields only chunks with an unjudged item; kept so, cheaply
            continue
        # Replies that are no chat completions condemn the server only on a chunk judged whole, from two prompts or
        # more (identical groundings share one request): the error verdicts sent again by --retry-errors may be
        # items the server cannot answer, stored as such before, and must not wedge the stage.
        several = len(chunk) == whole and len({(r.task_id, r.subgoals_json, r.actions) for r in chunk}) > 1
        items = [Grounding(tasks[r.task_id], int(r.step), int(r.k), json.loads(r.subgoals_json), r.actions,
                           {"ok": bool(r.ok), "values": json.loads(r.values_json), "answer": r.answer,
                            "error": r.error}, bool(r.correct)) for r in chunk]
        verdicts = critic.judge(items)
        if all(_unusable(v, several) for v in verdicts):
            refused = all(v.extra.get("refused") for v in verdicts)
            raise RuntimeError(_unreachable_message(ctx, len(items), verdicts[0].raw, refused))
        rows = [{"run_id": ctx.run_id, "iteration": ctx.iteration, "task_id": item.task.id, "step": item.step,
                 "k": item.k, "backend": v.backend, "model": v.model, "status": v.status,
                 "reference_guided": v.reference_guided, "raw": v.raw,
                 "corrected_subgoals_json": None if v.corrected_subgoals is None else json.dumps(v.corrected_subgoals),
                 "corrected_actions": v.corrected_actions, "latency_s": v.latency_s,
                 "prompt_tokens": v.prompt_tokens, "completion_tokens": v.completion_tokens,
                 "finish_reason": v.finish_reason, "extra_json": json.dumps(v.extra, default=str)}
                for item, v in zip(items, verdicts)]
        written += ctx.store.write("verdicts", rows)
        ctx.report(index + 1, n_chunks, f"{written} verdicts")
    return {"rows": ctx.store.count("verdicts", ctx.run_id, ctx.iteration), "new_rows": written}


def _unusable(verdict, several: bool) -> bool:
    """Whether a verdict says the critic cannot be used: unreachable, or (``several``: in a chunk judged whole from
    two prompts or more, every one so) a reply that is no chat completion or a request refused as invalid. A batch
    that came back whole as HTML or bare text is a server of another kind on the URL; one refused whole with 400 a
    setting every request carries (vLLM refuses every request whose ``max_tokens`` exceeds its context, 4,096 by
    default as ``critic.max_tokens`` is). Their verdicts were stored as errors and the stage read done, exit 0,
    nothing said, and the grounder trained on no correction."""
    return verdict.status == "error" and bool(verdict.extra.get("unreachable") or (
        several and (verdict.extra.get("malformed") or verdict.extra.get("refused"))))


def _unreachable_message(ctx: StageContext, n_items: int, first_error: str, refused: bool = False) -> str:
    """Why the stage stopped and the two ways on: resume once the critic answers, or judge with another server;
    ``refused``: every request was refused as invalid, so the settings they share come first."""
    groundings = "grounding" if n_items == 1 else f"{n_items} groundings"
    shown = first_error if len(first_error) <= 300 else first_error[:300] + " ..."  # a proxy's whole HTML page
    db = shlex.quote(str(ctx.store.path))
    settings = (" Every request was refused as invalid: check what they all carry, critic.max_tokens (within the "
                "served context) and critic.temperature." if refused else "")
    return (f"the critic could not judge {'the' if n_items == 1 else 'any of the'} {groundings} of this batch "
            f"({_critic_named(ctx)}; first error: {shown}); nothing of the batch was stored. Once the critic "
            f"answers, resume the run, or judge with another server: `python -m engine step critique --db {db} "
            f"--run {ctx.run_id} --iteration {ctx.iteration} --base-url URL --model MODEL`{settings}")


def _critic_named(ctx: StageContext) -> str:
    """The critic as its config fields name it, so the user sees which setting to check."""
    critic = ctx.config.critic
    where = f", critic.base_url = {critic.base_url}" if critic.backend == "openai" else ""
    return f"critic.backend = {critic.backend}, critic.model = {critic.model}{where}"
