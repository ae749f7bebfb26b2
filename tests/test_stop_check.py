"""``engine.stop_check``: a stage's stop request reaches the generation and scoring kernels between batches.

The evaluate stage records nothing until its one ``evaluate`` call returns, so a Stop waited for the whole
evaluation; its kernels now poll the stop check the stage sets (``stop_checked``), before each batch, the shared-prefix
walk of the fast scorer included (its prompt forwards are most of a score's work). Without a check set nothing
changes. Tiny agents built from a config (``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from engine import generation, scoring
from engine.prefix_cache import KernelStats
from engine.stop_check import between_batches, stop_checked


class Stopped(Exception):
    pass


def stop_after(polls: int):
    """A stop check that lets ``polls`` batches start, then raises."""
    seen = [0]

    def check() -> None:
        seen[0] += 1
        if seen[0] > polls:
            raise Stopped

    return check, seen


def test_without_a_check_nothing_happens_and_the_check_is_per_block():
    between_batches()  # no check set: a no-op
    check, seen = stop_after(0)
    with pytest.raises(Stopped), stop_checked(check):
        between_batches()
    between_batches()  # the block's check is gone with the block
    assert seen[0] == 1


@pytest.mark.parametrize("fast", [False, True])
def test_scoring_stops_at_the_first_batch_after_the_request(tiny_agents, fast):
    _, grounder = tiny_agents
    # Four tasks, two plans each: the rows of a task share its prompt, a trie node the fast scorer's walk computes.
    prompts = [f"Task {i}: add {i} and {i + 1}, then double it." for i in range(4) for _ in range(2)]
    targets = [f"R1 = Calculator({i}+{i + 1}); R2 = Calculator(R1*{k + 2})" for i in range(4) for k in range(2)]
    check, seen = stop_after(1)
    stats = KernelStats()
    was_training = grounder.model.training
    with pytest.raises(Stopped), stop_checked(check):
        scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets, batch_size=2, fast=fast,
                              stats=stats)
    assert seen[0] == 2  # one batch ran; the next poll stopped it
    # the fast scorer stops inside its prompt walk (before it, prefill_root's one forward), not after every prompt
    assert stats.forwards <= 2
    assert grounder.model.training == was_training  # put back in the mode it came in


@pytest.mark.parametrize("fast", [False, True])
def test_generation_stops_between_batches(tiny_agents, fast):
    planner, _ = tiny_agents
    prompts = [f"Task {i}: how many apples?" for i in range(6)]
    config = generation.GenerationConfig(max_new_tokens=4, temperature=0.0, batch_size=2)
    check, seen = stop_after(1)
    with pytest.raises(Stopped), stop_checked(check):
        generation.generate(planner.model, planner.tokenizer, prompts, config, fast=fast)
    assert seen[0] == 2
    assert len(generation.generate(planner.model, planner.tokenizer, prompts, config, fast=fast)) == 6  # no check
