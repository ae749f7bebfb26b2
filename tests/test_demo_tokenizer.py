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
