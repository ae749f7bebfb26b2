"""The benchmark suite at tiny sizes (fast path == baseline asserted, timings never) and the fast kernels directly:
prefix-shared scoring equals naive scoring; shared-prefill sampling keeps the generate contract."""

from __future__ import annotations

import json

import pytest

from engine import generation, prefix_cache, scoring
from engine.bench import common


@pytest.fixture(autouse=True)
def _reuse_tiny_agents(tiny_agents_dir, monkeypatch):
    # The benchmarks build tiny agents on demand; reuse the session's build instead.
    monkeypatch.setitem(common._TINY, "dir", tiny_agents_dir)


def _naive_single(agent, prompts, targets):
    return [scoring.score_targets_naive(agent.model, agent.tokenizer, [p], [t], batch_size=1)[0]
            for p, t in zip(prompts, targets)]


def test_prefix_shared_score_equals_naive_on_shared_unrelated_and_identical_prompts(tiny_agents, demo_tasks):
    from engine.bench.score import workload

    _, grounder = tiny_agents
    tasks = [t for t in demo_tasks if t.split == "train"]
    shared_p, shared_t = workload(grounder, tasks[:3], 5)  # K plans per task: long shared prefixes
    unrelated_p = ["<|user|>\nshort\n<|assistant|>\n", "completely different words here\n", "x"]
    unrelated_t = ["R1 = Calculator(3 * 4)", "R1 = Calculator(1 + 2); R2 = Calculator(R1 * 7)", "y"]
    identical_p, identical_t = [shared_p[0]] * 4, [shared_t[0], "x", shared_t[0], ""]
    for prompts, targets in ((shared_p, shared_t), (unrelated_p, unrelated_t), (identical_p, identical_t),
                             (shared_p + unrelated_p + identical_p, shared_t + unrelated_t + identical_t)):
        stats = prefix_cache.KernelStats()
        fast = scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets, batch_size=4, fast=True,
                                     stats=stats)
        assert fast == pytest.approx(_naive_single(grounder, prompts, targets), abs=1e-4)
        assert stats.computed >= stats.necessary > 0
    stats, naive = prefix_cache.KernelStats(), prefix_cache.KernelStats()
    scoring.score_targets(grounder.model, grounder.tokenizer, shared_p, shared_t, batch_size=8, fast=True, stats=stats)
    scoring.score_targets_naive(grounder.model, grounder.tokenizer, shared_p, shared_t, batch_size=8, stats=naive)
    assert stats.computed < naive.computed  # the shared prefixes were computed once
    # Level by level and leaves across nodes: forwards grow with the trie's depth, not its size; duplicates once.
    assert stats.forwards <= 8 and stats.computed <= 1.3 * stats.necessary, stats
    twice = prefix_cache.KernelStats()
    scoring.score_targets(grounder.model, grounder.tokenizer, shared_p * 2, shared_t * 2, batch_size=8, fast=True,
                          stats=twice)
    assert twice.computed == stats.computed


def test_prefix_shared_score_with_truncation_and_empty_input(tiny_agents):
    _, grounder = tiny_agents
    prompts = ["<|user|>\na long prompt with many many words in it\n<|assistant|>\n"] * 3
    targets = ["R1 = Calculator(3 * 4)", "R1 = Calculator(1 + 2)", "a target longer than the limit " * 3]
    fast = scoring.score_targets(grounder.model, grounder.tokenizer, prompts, targets, max_length=12, fast=True)
    naive = scoring.score_targets_naive(grounder.model, grounder.tokenizer, prompts, targets, max_length=12)
    assert fast == pytest.approx(naive, abs=1e-4)
    assert scoring.score_targets(grounder.model, grounder.tokenizer, [], [], fast=True) == []


def test_necessary_tokens_counts_distinct_prefixes():
    assert prefix_cache.necessary_tokens([[1, 2, 3], [1, 2, 4], [1, 2, 3], [5]]) == 5


def test_shared_prefill_sampling_contract(tiny_agents, demo_tasks):
    from engine.turns import planner_prompt

    planner, grounder = tiny_agents
    prompts = [planner_prompt(planner, t) for t in demo_tasks[:3]]
    config = generation.GenerationConfig(max_new_tokens=10, temperature=1.0, top_p=0.95, num_return_sequences=4,
                                         batch_size=2)
    first = generation.generate(planner.model, planner.tokenizer, prompts, config, seed=3, fast=True)
    assert [len(o) for o in first] == [4, 4, 4]
    assert first == generation.generate(planner.model, planner.tokenizer, prompts, config, seed=3, fast=True)
    greedy = generation.GenerationConfig(max_new_tokens=10, temperature=0.0, batch_size=4)
    from engine.bench.score import workload

    ground_prompts, _ = workload(grounder, [t for t in demo_tasks if t.split == "train"][:2], 3)
    for agent, batch in ((planner, prompts), (grounder, ground_prompts)):
        fast = generation.generate(agent.model, agent.tokenizer, batch, greedy, fast=True)
        assert fast == generation.generate_naive(agent.model, agent.tokenizer, batch, greedy)
    greedy_k = generation.GenerationConfig(max_new_tokens=8, temperature=0.0, num_return_sequences=2, batch_size=4)
    out = generation.generate(planner.model, planner.tokenizer, prompts, greedy_k, fast=True)
    assert all(len(o) == 2 and o[0] == o[1] for o in out)  # greedy K samples are K copies


@pytest.mark.parametrize("name", ["score", "sample", "ground", "store", "train", "iteration", "curation",
                                  "warm_start", "floor"])
def test_benchmark_smoke_tiny(name, capsys):
    from engine.__main__ import main

    code = main(["bench", name, "--size", "tiny", "--repeats", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["benchmark"] == name and report["correct"]["ok"]
    assert "sizes" in report and "ratios" in report
    if name == "score":
        assert report["correct"]["max_abs_logppl_diff"] <= 1e-4
        assert report["variants"]["prefix_shared"]["computed_tokens"] < \
            report["variants"]["arrival_batches"]["computed_tokens"]
    if name == "sample":
        assert report["correct"]["same_well_formed"]
    if name == "ground":
        assert report["correct"]["same_groundings"]
    if name == "warm_start":  # grouping by length and micro-batches compute less padding than random batches
        variants = report["variants"]
        for fewer in ("grouped", "micro4", "micro8"):
            assert variants[fewer]["padding_share"] < variants["random"]["padding_share"], fewer
        assert report["ratios"]["loss_tokens_vs_micro4"] > 0
        assert report["correct"]["loss_tokens_matches_random"] and "random_vs_loss_tokens" in report["ratios"]
    if name == "floor":  # the counted run reached the timed run's metrics; every model stage did counted work
        assert report["correct"]["same_metrics"] and report["correct"]["every_stage_counted"]
        stages = report["stages"]
        for stage in ("0:evaluate", "1:sample", "1:score", "1:train_planner", "1:ground", "1:train_grounder",
                      "1:evaluate"):
            assert stages[stage]["gflop"] > 0 and 0 < stages[stage]["floor_s"] <= stages[stage]["measured_s"], stage
        assert stages["1:pairs"]["gflop"] == 0  # choosing pairs is bookkeeping, no model work
        projection = report["projection"]
        assert 0 < projection["floor_s"] < projection["measured_s"] and projection["iterations"] >= 1
    if name == "curation":  # the studio served the decisions over HTTP; the evidence is the scorer's numbers
        assert report["correct"]["reviews_stored"] == report["sizes"]["decisions"] > 0
        assert report["correct"]["surprisal_vs_stored_logppl_max_abs_diff"] < 1e-5
        for key in ("decision_p50_ms", "decision_p95_ms", "surprisal_cold_p95_ms", "surprisal_cached_p95_ms"):
            assert report[key] > 0


def test_contention_runs_competitors_only_during_the_loaded_measurement():
    """``bench --contention N``: N busy processes exist while the second measurement runs and are gone afterwards;
    the report holds both measurements, each timing's slowdown and each ratio quiet and contended."""
    import os

    from engine.bench.contention import competing, with_contention

    with competing(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    calls = []

    def measure() -> dict:
        calls.append(len(calls))
        scale = 1.0 if len(calls) == 1 else 2.0
        return {"variants": {"fast": {"median_s": 1.0 * scale}, "slow": {"median_s": 4.0}},
                "ratios": {"fast_vs_slow": 4.0 / scale}, "iteration_s": 10.0 * scale, "correct": {"ok": True}}

    report = with_contention(measure, 1)
    assert report["slowdown"] == {"fast": 2.0, "slow": 1.0, "iteration_s": 2.0}
    assert report["ratios_side_by_side"] == {"fast_vs_slow": {"quiet": 4.0, "contended": 2.0}}
    assert report["contention"] == 1 and report["correct"]["ok"] and len(calls) == 2


def test_floor_compares_metrics_within_a_relative_tolerance():
    """``bench floor`` trusts its FLOP count only when the counted run reached the timed run's metrics: equal up to
    float rounding passes; a changed value or a metric one run lacks does not."""
    from engine.bench.floor import METRIC_TOLERANCE, _relative_difference

    assert _relative_difference(0.163033935, 0.163033954) <= METRIC_TOLERANCE  # the rounding seen at default size
    assert _relative_difference(2.1502392, 2.1502390) <= METRIC_TOLERANCE
    assert _relative_difference(0.40, 0.41) > METRIC_TOLERANCE  # one task's answer changed
    assert _relative_difference(0.5, None) > METRIC_TOLERANCE
