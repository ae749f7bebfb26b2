"""The names an export is asked for by: its file formats (``FORMATS``) and the forms of its pairs (``PAIRS_FORMS``).

Names only, with no import beyond the standard library: ``python -m engine export``'s parser offers them as choices
and is built for every ``--help``, which must not load pyarrow (``engine.export``) or the training stack. The
writers in ``engine.export`` and the studio's Export tab read the same tuples, so a form added here is offered
everywhere at once.
"""

from __future__ import annotations

FORMATS = ("jsonl", "parquet")
# How a pair is written: "text", the rendered strings train_planner feeds DPOTrainer; "messages", TRL's conversational
# preference format (message lists the trainer renders with the tokenizer's chat template).
PAIRS_FORMS = ("text", "messages")
