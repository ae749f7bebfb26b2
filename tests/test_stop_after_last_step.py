"""A stop pressed once the last optimizer step has begun keeps the training (``engine.stages.context.StopLatch``
and ``engine.training.StepHooks``): a Spaces visitor saw "SFT grounder · stopped · at 5/5 — nothing kept" after every
step had been logged. A stop with steps left still cuts the training short, and the stage keeps nothing."""

from __future__ import annotations

import copy

import pytest

from engine.config import TrainSettings
from engine.stages.context import StopLatch
from engine.training import sft_train
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
    assert pressed["now"] and history[-1]["step"] == last_step and latch.fired is cut
