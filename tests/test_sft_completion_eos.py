"""An SFT row's completion ends where the assistant's turn ends, whatever the chat template renders after the
end-of-turn token: TRL appends the EOS itself (``engine.prompts.training_completion``)."""

from __future__ import annotations

import pytest

from engine import prompts
from engine.stages.train import grounder_sft_rows
from engine.turns import Agent
from tests.test_preflight import CHATML


def _chatml_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"<unk>": 0, "<|im_end|>": 1}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|im_end|>",
                                        unk_token="<unk>")
    tokenizer.chat_template = CHATML
    return tokenizer


def test_a_chatml_grounder_row_ends_with_the_actions(demo_tasks):
    """ChatML renders ``<|im_end|>\\n`` after each turn (Qwen2.5, SmolLM2): the suffix cut left it whole, and TRL
    trained on ``...<|im_end|>\\n<|im_end|>``."""
    task = demo_tasks[0]
    agent = Agent(None, _chatml_tokenizer(), "tokenizer")
    [row] = grounder_sft_rows(agent, [(task, 0, list(task.gold_subgoals), task.actions_text)])
    assert row["completion"] == task.actions_text


@pytest.mark.parametrize(("rendered", "expected"), [
    ("R1 = Calculator(1+2)<|im_end|>\n", "R1 = Calculator(1+2)"),
    ("R1 = Calculator(1+2)<|im_end|>", "R1 = Calculator(1+2)"),
    ("R1 = Calculator(1+2)", "R1 = Calculator(1+2)"),  # a template without an end-of-turn: TRL adds one
    ("a<|im_end|> b", "a<|im_end|> b"),  # text after it is not the template's trailing whitespace: left as is
])
def test_training_completion(rendered, expected):
    assert prompts.training_completion(rendered, "<|im_end|>") == expected
    assert prompts.training_completion(rendered, None) == rendered
