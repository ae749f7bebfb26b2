"""What an SFT export leaves out by design: ``replay_note(store, run_id, iteration, what) -> str``.

train_grounder trains on the iteration's curated SFT records (what ``python -m engine export --what sft`` and the
studio's Export tab write) with original (warm-start) rows mixed in beside them (``sft.original_ratio``); those rows
are not in the file. ``replay_note`` says so in one clause, lower case and without a full stop, for the caller to put
in its own sentence (the CLI prints ``note: <clause>`` on stderr, the studio capitalises it after the export's line):
the count the stage recorded (``original_rows``) once it has trained, or before that what the iteration's config
(its curriculum phase applied) will mix in. ``""`` for anything but SFT, for a train_grounder that mixed in none
(ratio 0, or no new rows: the grounder kept) or was skipped, and for a grounder that learns by GRPO (no mixing) or a
stored config that no longer loads. Reads only the store and the run's config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.schedule import iteration_config
from engine.stored_config import stored_config

if TYPE_CHECKING:
    from engine.store import Store


def replay_note(store: Store, run_id: str, iteration: int, what: str) -> str:
    """The clause about the original rows an SFT export of ``iteration`` does not hold (see the module docstring)."""
    if what != "sft":
        return ""
    state = store.stage_status(run_id, int(iteration)).get("train_grounder")
    if state is not None and state["status"] in ("done", "skipped"):  # what the stage did, not what it would do
        mixed = int((state.get("counts") or {}).get("original_rows") or 0)
        return (f"not in the file: the {mixed} original (warm-start) rows train_grounder mixed in beside these "
                "records (sft.original_ratio)" if mixed else "")
    run = store.get_run(run_id) or {}
    try:
        config = iteration_config(stored_config(run.get("config") or {}), int(iteration))
    except (ConfigError, TypeError, ValueError):
        return ""
    ratio = config.sft.original_ratio
    if config.stages.grounder_objective != "sft" or ratio == 0:
        return ""
    share = "all of them" if ratio < 0 else f"{ratio:g} per new row"
    return ("not in the file: the original (warm-start) rows train_grounder will mix in beside these records "
            f"(sft.original_ratio = {ratio:g}: {share})")
