"""Train a small byte-level BPE tokenizer for the demo agents, offline, with the ``tokenizers`` library.

Digits are split one per token (so models learn arithmetic copying, not number spellings). The fixed Lumos
instruction blocks (``phrases``) become single added tokens: prompts keep Lumos's exact text while a tiny model
spends its compute on the task, not on re-reading the same paragraph. Special tokens: ``<pad>``, ``</s>`` (EOS,
as in Lumos checkpoints), ``<|user|>`` and ``<|assistant|>``. With ``pieces`` (the demo world's name syllables),
every occurrence of a piece is cut out before BPE, so an invented name is a few common tokens, never one rare
whole-name token: copying "Wynash Works" from a question is then copying ``Wyn`` ``ash`` -- tokens seen in thousands
of rows -- the same reason digits are split. The result is a ``PreTrainedTokenizerFast`` with a
chat template that renders the Lumos layout, loadable with ``AutoTokenizer``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD, EOS, USER, ASSISTANT = "<pad>", "</s>", "<|user|>", "<|assistant|>"

# The Lumos chat layout "<|user|>\n{user}\n<|assistant|>\n{assistant}</s>" as a Jinja chat template.
LUMOS_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '</s>' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], phrases: Sequence[str] = (), vocab_size: int = 2048,
                    pieces: Sequence[str] = ()):
    """Return a ``PreTrainedTokenizerFast`` trained on ``texts`` with each of ``phrases`` as one token and each of
    ``pieces`` (matched in any letter case, anywhere in a word) as a pre-tokenizer boundary."""
    import re

    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    steps = [pre_tokenizers.Digits(individual_digits=True)]
    if pieces:
        # Longest first, so "tri" is one piece and never "t" + a shorter piece; sorted so the file is reproducible.
        alternatives = "|".join(re.escape(p) for p in sorted(set(pieces), key=lambda p: (-len(p), p)))
        steps.append(pre_tokenizers.Split(Regex(f"(?i:{alternatives})"), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, USER, ASSISTANT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # Longest first: an added token that is a prefix of another must not win the match. Ties by text: a set's order
    # changes with the interpreter's hash seed, and the ids must not (two builds gave three phrases other ids).
    ordered = sorted(set(phrases), key=lambda p: (-len(p), p))
    tokenizer.add_tokens([AddedToken(p, normalized=False) for p in ordered])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, bos_token=None, unk_token=None,
        additional_special_tokens=[USER, ASSISTANT],
    )
    fast.chat_template = LUMOS_CHAT_TEMPLATE
    fast.padding_side = "right"
    return fast
