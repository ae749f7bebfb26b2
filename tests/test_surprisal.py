"""Token-level evidence (engine/surprisal.py): the per-token surprisals of the gold actions under a plan are the
scorer's numbers: their mean equals the stored log-PPL of that plan; cached; a clear error when the checkpoint is
gone."""

from __future__ import annotations

import math
import shutil

import pytest

from engine.loop import create_run, run_stage
from engine.models import load_tokenizer
from engine.scoring import score_targets
from engine.store import Store
from engine.surprisal import SurprisalService, SurprisalUnavailable, token_surprisal

pytestmark = pytest.mark.slow  # samples and scores with the tiny agents


def test_the_mean_surprisal_is_the_scorers_log_ppl(tiny_agents):
    planner, grounder = tiny_agents
    prompts = ["Task: add 3 and 4\nPlan: Subgoal 1: add them", "Task: add 3 and 4\nPlan: Subgoal 1: think"]
    target = "R1 = Calculator(3+4)"
    expected = score_targets(grounder.model, grounder.tokenizer, prompts, [target, target], fast=False)
    for prompt, want in zip(prompts, expected):
        tokens, nll = token_surprisal(grounder.model, grounder.tokenizer, prompt, target)
        n_target = len(grounder.tokenizer(target, add_special_tokens=False)["input_ids"])
        assert len(tokens) == len(nll) == n_target + 1  # every gold token and the closing EOS
        assert all(v >= 0 for v in nll)
        assert abs(sum(nll) / len(nll) - want) < 1e-5
    assert expected[0] != expected[1]  # two different plans: the evidence can tell them apart


def test_stored_plans_get_evidence_equal_to_their_stored_score(tmp_path, loop_config):
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score"):
            assert run_stage(store, run_id, 1, stage, config=loop_config) == "done"
        scores = store.frame("scores", run_id, 1)
        service = SurprisalService()
        tokenizer = load_tokenizer(loop_config.grounder.path)
        eos = tokenizer.decode([tokenizer.eos_token_id])
        for row in scores.head(4).itertuples():
            found = service.plan(store, run_id, 1, row.task_id, row.step, row.k)
            assert found.stored_logppl == pytest.approx(row.logppl, abs=0)
            assert abs(found.mean - row.logppl) < 1e-5
            assert len(found.nll) == row.n_tokens
            assert found.tokens[-1] == eos  # the closing EOS is scored too, as the scorer does
            assert service.plan(store, run_id, 1, row.task_id, row.step, row.k) is found  # cached
        with pytest.raises(SurprisalUnavailable, match="no plan 99"):
            service.plan(store, run_id, 1, scores.task_id.iloc[0], 0, 99)

        # A later iteration's evidence needs the checkpoint iteration 1 wrote: gone, it says so.
        gone = tmp_path / "gone-checkpoint"
        shutil.copytree(loop_config.grounder.path, gone)
        store.put_checkpoint(run_id, 1, "grounder", gone, "full")
        shutil.rmtree(gone)
        with pytest.raises(SurprisalUnavailable, match="iteration 1 .*gone"):
            service.plan(store, run_id, 2, scores.task_id.iloc[0], 0, 0)
        assert math.isfinite(found.mean)
