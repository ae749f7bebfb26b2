"""engine.demo.tokenizer: the demo tokenizer's ids do not depend on the interpreter's hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Three phrases of one length (26 characters): the case where a set's order used to leak into the ids.
SCRIPT = """
import json
from engine.demo.tokenizer import train_tokenizer
tok = train_tokenizer(["a b c 1 2 3 plan the task"] * 20, phrases=["Yes, I will stop planning.",
                      "No, I will keep planning. ", ". Should we stop planning?", "short"], vocab_size=300)
print(json.dumps({t: tok.convert_tokens_to_ids(t) for t in tok.get_added_vocab()}))
"""


def _ids(hash_seed: str) -> dict[str, int]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_added_phrase_ids_are_the_same_under_any_hash_seed():
    first, second = _ids("1"), _ids("2")
    assert first == second
    phrases = sorted(["Yes, I will stop planning.", "No, I will keep planning. ", ". Should we stop planning?"])
    assert [first[p] for p in phrases] == sorted(first[p] for p in phrases)  # equal lengths: in text order
    assert first["short"] > max(first[p] for p in phrases)  # longest first


def test_name_pieces_cut_invented_names_into_syllable_tokens_and_decode_exactly():
    from engine.demo.qa_world import NAME_SYLLABLES
    from engine.demo.tokenizer import train_tokenizer

    corpus = ["Who is the founder of Wynash Works? R1 = KnowledgeQuery(Wynash Works)",
              "Who is the founder of Zarcor Works?"] * 50
    whole = train_tokenizer(corpus, vocab_size=400)
    cut = train_tokenizer(corpus, vocab_size=400, pieces=NAME_SYLLABLES)
    text = "Who is the founder of Wynash Works?"

    def pieces(tok) -> list[str]:
        return [tok.decode([i]) for i in tok(text)["input_ids"]]

    assert " Wynash" in pieces(whole)  # a frequent name is learned as one token ...
    assert {"Wyn", "ash"} <= set(pieces(cut)) and not any("Wynash" in p for p in pieces(cut))  # ... or not at all
    unseen = "Who is the founder of Wyncor Works?"  # a new name of known syllables is those syllables' tokens
    assert [cut.decode([i]) for i in cut(unseen)["input_ids"]][-5:-2] == [" ", "Wyn", "cor"]
    for tok in (whole, cut):
        assert tok.decode(tok(text + " " + unseen)["input_ids"]) == text + " " + unseen


def test_demo_models_reads_a_boolean_flag_both_ways():
    import argparse

    from engine.commands import demo_models

    parser = argparse.ArgumentParser()
    demo_models.add_arguments(parser)
    assert parser.parse_args([]).name_pieces is False
    assert parser.parse_args(["--name-pieces"]).name_pieces is True
    assert parser.parse_args(["--no-name-pieces"]).name_pieces is False
