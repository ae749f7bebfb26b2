"""A stop pressed once the last optimizer step has begun keeps the training (``engine.training.StopLatch``, which
``StepHooks`` tells whether steps remain): a Spaces visitor saw "SFT grounder · stopped · at 5/5 — nothing kept"
after every step had been logged. A stop with steps left still cuts the training short, and the stage keeps nothing."""

from __future__ import annotations

import copy

import pytest

from engine.config import TrainSettings
from engine.training import StopLatch, sft_train
from tests.test_training import _grounder_rows

pytestmark = pytest.mark.slow  # trains a tiny model


@pytest.mark.parametrize(("pressed_after", "last_step", "cut"), [(2, 3, False), (1, 2, True)])
def test_a_stop_is_a_cut_only_while_steps_remain(tiny_agents, demo_tasks, pressed_after, last_step, cut):
    _, grounder = tiny_agents
    pressed = {"now": False}

    def on_log(line: dict) -> None:  # the page's Stop, pressed as step `pressed_after` is logged
        pressed["now"] = pressed["now"] or line.get("step", 0) >= pressed_after

    latch = StopLatch(lambda: pressed["now"])
    settings = TrainSettings(learning_rate=1e-3, max_steps=3, batch_size=2, max_length=256, logging_steps=1)
    _, history = sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, _grounder_rows(demo_tasks, 6), settings,
                           on_log=on_log, should_stop=latch)
    assert pressed["now"] and history[-1]["step"] == last_step and latch.cut is cut


def test_a_launched_worker_still_counts_every_step(tiny_agents, demo_tasks, tmp_path):
    """The worker of an accelerate launch counts its optimizer steps by the stop check's calls
    (``engine.train_worker.progress_hook``): it is asked after the last step too (the review of this change found
    "steps: 2" after 3 steps, and no count at all after a 1-step training, while the check skipped the last step)."""
    import json

    from engine.train_worker import progress_hook, rank_progress_path

    _, grounder = tiny_agents
    log = tmp_path / "train_log.jsonl"
    settings = TrainSettings(learning_rate=1e-3, max_steps=3, batch_size=2, max_length=256)
    sft_train(copy.deepcopy(grounder.model), grounder.tokenizer, _grounder_rows(demo_tasks, 6), settings,
              should_stop=progress_hook(log, lambda: False))
    assert json.loads(rank_progress_path(log, 0).read_text())["steps"] == 3
