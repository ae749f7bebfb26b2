"""Token-level evidence for a plan: the grounder's surprisal at each gold action token given that plan.

A pair says *that* the grounder found the gold actions likelier under one plan; the per-token surprisals say
*where*: under the rejected plan the grounder typically gets lost at one operand or one tool name.

Contract:

* ``token_surprisal(model, tokenizer, prompt, target)`` -> ``(token_texts, nlls)``: the NLL (natural log) of every
  target token and the closing EOS, built from the very rows the scorer scores (``engine.scoring.score_rows``), so
  ``mean(nlls)`` equals ``score_targets`` for the same pair to float rounding (a test holds it to 1e-5).
* ``SurprisalService.plan(store, run_id, iteration, task_id, step, k)`` -> ``PlanSurprisal`` for a stored plan, by
  the grounder that iteration started from (the one that scored the plans: the previous iteration's checkpoint,
  else the configured model), with the stored log-PPL beside the recomputed mean. Grounders (by checkpoint path)
  and results (by run, iteration, task, step, k and checkpoint) are kept in small LRU caches, so a second look is
  a dictionary lookup. A checkpoint directory that no longer exists raises ``SurprisalUnavailable`` saying which
  checkpoint is gone; so does a plan that is not stored.
* Read-only: nothing is written to the store (the studio may hold it read-only while a job writes).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from engine import scoring
from engine.loop import run_config
from engine.outcome import gold_step_results
from engine.prefix_cache import device_of
from engine.runtime import load_agent
from engine.stages.context import starting_checkpoint
from engine.store import Store
from engine.turns import Agent, grounding_pair, plan_subgoals


class SurprisalUnavailable(RuntimeError):
    """The evidence cannot be computed (the plan is not stored, or the grounder checkpoint is gone)."""


@dataclass(frozen=True)
class PlanSurprisal:
    tokens: list[str]  # each gold action token as text, the closing EOS last
    nll: list[float]  # its surprisal in nats, same order
    mean: float  # mean of ``nll``: the plan's log-PPL, recomputed
    stored_logppl: float | None  # what the score stage stored for this plan (None when unscored)
    plan: str  # the plan text the grounder was given
    grounder: str  # the checkpoint (or configured model) that computed it

    def as_dict(self) -> dict:
        return {"tokens": self.tokens, "nll": self.nll, "mean": self.mean, "stored_logppl": self.stored_logppl,
                "plan": self.plan, "grounder": self.grounder}


@torch.no_grad()
def token_surprisal(model, tokenizer, prompt: str, target: str,
                    max_length: int | None = None) -> tuple[list[str], list[float]]:
    """Per-token NLL of ``target`` + EOS given ``prompt``; the mean is the scorer's log-PPL (module docstring)."""
    (ids, n_label), = scoring.score_rows(tokenizer, [prompt], [target], max_length)
    if n_label == 0:
        return [], []
    was_training = model.training
    model.eval()
    try:
        input_ids = torch.tensor([ids], device=device_of(model))
        logits = model(input_ids=input_ids).logits[0, -n_label - 1:-1].float()
    finally:
        model.train(was_training)
    labels = input_ids[0, -n_label:]
    nll = -torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    texts = [tokenizer.decode([i]) for i in ids[-n_label:]]
    return texts, [float(v) for v in nll]


class SurprisalService:
    """Computes and caches ``PlanSurprisal`` for stored plans (see the module docstring). Thread-safe."""

    def __init__(self, max_grounders: int = 2, max_results: int = 512) -> None:
        self._grounders: OrderedDict[str, Agent] = OrderedDict()
        self._results: OrderedDict[tuple, PlanSurprisal] = OrderedDict()
        self._max_grounders, self._max_results = max_grounders, max_results
        self._lock = threading.Lock()

    def plan(self, store: Store, run_id: str, iteration: int, task_id: str, step: int, k: int) -> PlanSurprisal:
        config = run_config(store, run_id)
        path = grounder_path(store, run_id, iteration, config.grounder.path)
        key = (run_id, iteration, task_id, step, k, path)
        with self._lock:
            if key in self._results:
                self._results.move_to_end(key)
                return self._results[key]
        plans = store.frame("plans", run_id, iteration, task_id=task_id, step=step, k=k)
        if plans.empty:
            raise SurprisalUnavailable(f"run {run_id} iteration {iteration} has no plan {k} of {task_id} step {step}")
        row = plans.iloc[0]
        task = store.get_task(run_id, task_id)
        scores = store.frame("scores", run_id, iteration, task_id=task_id, step=step, k=k)
        with self._lock:
            grounder = self._grounder(path, config)
            subgoals = plan_subgoals(json.loads(row["subgoals_json"]), row["text"])
            results = gold_step_results(task) if step else []
            prompt, target = grounding_pair(grounder, task, step, subgoals, results or [])
            tokens, nll = token_surprisal(grounder.model, grounder.tokenizer, prompt, target)
            found = PlanSurprisal(tokens, nll, sum(nll) / len(nll) if nll else math.nan,
                                  None if scores.empty else float(scores["logppl"].iloc[0]), row["text"], path)
            self._results[key] = found
            while len(self._results) > self._max_results:
                self._results.popitem(last=False)
        return found

    def _grounder(self, path: str, config) -> Agent:
        if path in self._grounders:
            self._grounders.move_to_end(path)
            return self._grounders[path]
        section = config.grounder
        agent = load_agent(section, path if path != section.path else None)
        self._grounders[path] = agent
        while len(self._grounders) > self._max_grounders:
            self._grounders.popitem(last=False)
        return agent


def grounder_path(store: Store, run_id: str, iteration: int, configured: str) -> str:
    """The grounder iteration ``iteration`` started from (``starting_checkpoint``, as the score stage used it);
    raises ``SurprisalUnavailable`` when that checkpoint's directory is gone."""
    found = starting_checkpoint(store, run_id, "grounder", iteration)
    if found is None:
        if not Path(configured).is_dir() and Path(configured).is_absolute():
            raise SurprisalUnavailable(f"the configured grounder {configured} is gone")
        return configured
    t, path = found
    if not Path(path).is_dir():
        raise SurprisalUnavailable(f"the grounder checkpoint of iteration {t} ({path}) is gone: the evidence needs "
                                   "the model that scored these plans")
    return path
