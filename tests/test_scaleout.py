"""Scale-out: generation backends (hf default, optional vLLM), training through `accelerate launch`, GPU presets.

Runs on a CPU: the accelerate path is exercised with one process (examples/accelerate/single_process.yaml); vLLM
tests skip unless the package is installed (it needs a CUDA GPU).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from engine import generation, models
from engine.config import LaunchSection, TrainSettings, load_config
from engine.errors import ConfigError
from engine.generators import generator_for
from engine.loop import create_run, run_stage
from engine.store import Store

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_CUDA = torch.cuda.is_available()


# -- config and presets ----------------------------------------------------------------------------------------------

def test_gpu_presets_load():
    one = load_config(ROOT / "examples" / "gpu-24gb.toml")
    assert "0.5B" in one.planner.path and one.dpo.lora and one.sft.lora and one.launch.mode == "inprocess"
    eight = load_config(ROOT / "examples" / "gpu-8x.toml")
    assert eight.launch.mode == "accelerate" and eight.launch.num_processes == 8
    assert eight.launch.accelerate_config == "examples/accelerate/zero2.yaml"
    assert (eight.sample.backend, eight.ground.backend) == ("vllm", "vllm")
    assert (eight.dpo.learning_rate, eight.dpo.beta, eight.sft.learning_rate) == (4e-7, 0.2, 2e-5)
    assert not eight.dpo.lora and not eight.sft.lora and eight.dpo.bf16 == eight.sft.bf16 == "true"
    for preset in (one, eight):  # every referenced accelerate config ships with the repository
        assert (ROOT / preset.launch.accelerate_config).is_file()


def test_defaults_keep_the_single_process_paths():
    config = load_config(None)
    assert (config.sample.backend, config.ground.backend, config.launch.mode) == ("hf", "hf", "inprocess")


@pytest.mark.parametrize(("override", "message"), [
    (["sample.backend=tgi"], "sample.backend: 'tgi' is not one of hf, vllm"),
    (["ground.backend=x"], "ground.backend: 'x' is not one of hf, vllm"),
    (["launch.mode=slurm"], "launch.mode: 'slurm' is not one of inprocess, accelerate"),
    (["launch.num_processes=0"], "launch.num_processes: must be >= 1"),
    (["launch.mode=accelerate", "launch.accelerate_config="], "launch.accelerate_config: required"),
    (["sample.backend=vllm", "planner.adapter=/x"], "planner.adapter: not supported with sample.backend = vllm"),
    (["vllm.gpu_memory_utilization=1.5"], "vllm.gpu_memory_utilization: must be in (0, 1]"),
])
def test_scaleout_fields_are_validated(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, override)


def test_accelerate_configs_parse():
    import yaml

    for name in ("single_process", "ddp", "zero2", "zero3", "fsdp"):
        data = yaml.safe_load((ROOT / "examples" / "accelerate" / f"{name}.yaml").read_text())
        assert data["distributed_type"] in ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP"), name
        ds_file = data.get("deepspeed_config", {}).get("deepspeed_config_file")
        if ds_file:
            assert json.loads((ROOT / ds_file).read_text())["zero_optimization"]["stage"] in (2, 3)


# -- generation backends ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed: the missing-package error cannot happen")
def test_vllm_backend_without_vllm_names_the_field_and_the_install(tmp_path, loop_config, monkeypatch):
    """Refused when the run is created (``engine.package_check``); a stored run whose machine lost vLLM since fails
    at the stage, naming the same field."""
    from engine import vllm_backend

    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: False)
    loop_config.sample.backend = "vllm"
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(ConfigError) as refused:
            create_run(store, loop_config)
        assert store.list_runs() == []
        monkeypatch.setattr(vllm_backend, "vllm_available", lambda: True)
        run_id = create_run(store, loop_config)
        monkeypatch.setattr(vllm_backend, "vllm_available", lambda: False)
        with pytest.raises(ConfigError) as caught:
            run_stage(store, run_id, 1, "sample")
        assert store.stage_status(run_id, 1)["sample"]["status"] == "failed"
    for error in (refused.value, caught.value):
        assert error.field == "sample.backend"
        assert "pip install moat-studio[vllm]" in str(error)


@pytest.mark.parametrize("shared_prefill", [True, False])
def test_hf_generator_honours_shared_prefill(tiny_agents, shared_prefill):
    """The ``hf`` backend routes to the shared-prefill kernel (``sample.shared_prefill``, the default) or to one plain
    batched generate; both give K continuations per prompt, the same texts for a seed, and the same greedy text."""
    planner, _ = tiny_agents
    config = generation.GenerationConfig(max_new_tokens=6, temperature=1.0, top_p=0.95, num_return_sequences=2)
    prompts = ["<|user|>\nplan 1 + 2\n<|assistant|>\n", "<|user|>\nplan 3 * 4\n<|assistant|>\n"]
    generator = generator_for("hf", planner, "unused", field="sample.backend", shared_prefill=shared_prefill)
    via_backend = generator.generate(prompts, config, seed=7)
    assert via_backend == generation.generate(planner.model, planner.tokenizer, prompts, config, seed=7,
                                              fast=shared_prefill)
    assert via_backend == generator.generate(prompts, config, seed=7)
    assert [len(g) for g in via_backend] == [2, 2]
    greedy = generation.GenerationConfig(max_new_tokens=6, temperature=0.0)
    assert generator.generate(prompts, greedy) == generation.generate_naive(planner.model, planner.tokenizer, prompts,
                                                                            greedy)
    generator.close()


@pytest.mark.skipif(not (HAS_VLLM and HAS_CUDA), reason="needs vLLM and a CUDA GPU")
def test_vllm_backend_outputs_contract(tiny_agents_dir, tiny_agents):
    from engine.vllm_backend import VLLMGenerator

    planner, _ = tiny_agents
    prompts = ["<|user|>\nplan 1 + 2\n<|assistant|>\n", "<|user|>\nplan 3 * 4\n<|assistant|>\n"]
    with VLLMGenerator(str(tiny_agents_dir / "planner"), dtype="float32", tokenizer=planner.tokenizer) as gen:
        sampled = gen.generate(prompts, generation.GenerationConfig(max_new_tokens=8, num_return_sequences=3), seed=1)
        greedy = gen.generate(prompts, generation.GenerationConfig(max_new_tokens=8, temperature=0.0), seed=1)
    assert [len(s) for s in sampled] == [3, 3] and all(isinstance(t, str) for s in sampled for t in s)
    assert [len(g) for g in greedy] == [1, 1]


# -- training through accelerate launch ------------------------------------------------------------------------------

def _params(path):
    from transformers import AutoModelForCausalLM

    return {n: p.detach().clone() for n, p in AutoModelForCausalLM.from_pretrained(path).named_parameters()}


@pytest.mark.slow
def test_accelerate_launch_trains_planner_and_grounder(tmp_path, loop_config, tiny_agents_dir, monkeypatch):
    # One torch thread on both sides: a CPU matmul's reduction order depends on the thread count, and the engine
    # adapts this process's threads to the load at each stage's start, so the in-process reference below could run
    # with another count than the worker got at launch. Unpinned (before engine.launch.worker_environment, the worker
    # took every core), the two differed by 5e-7 to 2.2e-5 (depending on the tiny agents' weights) whenever this
    # process had one thread and the worker two; pinned, they are equal bit for bit.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the launched worker inherits the environment
    loop_config.launch.mode = "accelerate"
    loop_config.launch.accelerate_config = str(ROOT / "examples" / "accelerate" / "single_process.yaml")
    loop_config.launch.poll_s = 0.2
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, loop_config)
        for stage in ("sample", "score", "pairs", "ground", "critique", "train_planner", "train_grounder"):
            assert run_stage(store, run_id, 1, stage) == "done", (stage, store.stage_status(run_id, 1)[stage])
        assert store.count("pairs", run_id, 1) > 0, "min_gap 0 over 3 samples should give pairs"
        logs = store.frame("train_logs", run_id, 1)
        for stage, role in (("train_planner", "planner"), ("train_grounder", "grounder")):
            checkpoint = store.checkpoint(run_id, 1, role)
            assert checkpoint["path"].endswith(f"iter_01/{role}") and checkpoint["kind"] == "full"
            before, after = _params(tiny_agents_dir / role), _params(checkpoint["path"])
            assert all(not (before[n] == after[n]).all() for n in before if "norm" not in n), role
            assert (logs.stage == stage).sum() >= 2, stage  # per-step lines plus the final summary
            counts = store.stage_status(run_id, 1)[stage]["counts"]
            assert counts["log_lines"] == (logs.stage == stage).sum()
            assert set(counts["rank_steps"]) == {"0"} and counts["rank_steps"]["0"] >= 1  # the one worker's steps
            work = Path(checkpoint["path"]).parent / "launch" / stage
            spec = json.loads((work / "spec.json").read_text())
            assert spec["kind"] == ("dpo" if role == "planner" else "sft") and spec["settings"]["seed"] == 1
        assert any("rewards/margins" in text for text in logs[logs.stage == "train_planner"].logs_json)
        assert logs[logs.stage == "train_grounder"].loss.notna().any()
        grounder_ckpt = store.checkpoint(run_id, 1, "grounder")["path"]
    # The subprocess trains exactly what the in-process path would: same rows, settings, seed, trainer function.
    from engine.config import SFTSection
    from engine.training import sft_train

    work = Path(grounder_ckpt).parent / "launch" / "train_grounder"
    rows = [json.loads(line) for line in (work / "rows.jsonl").read_text().splitlines()]
    settings = SFTSection(**json.loads((work / "spec.json").read_text())["settings"])
    model, tokenizer = models.load_model(models.ModelSpec(str(tiny_agents_dir / "grounder")), trainable=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trained, _ = sft_train(model, tokenizer, rows, settings)
    finally:
        torch.set_num_threads(threads)
    launched = _params(grounder_ckpt)
    assert [n for n, p in trained.named_parameters() if not torch.equal(p, launched[n])] == []


def _fake_launch(monkeypatch, script: str):
    """Replace the accelerate command with a small Python script (the parent-side mechanics, in a second)."""
    from engine import launch

    monkeypatch.setattr(launch, "launch_command", lambda settings, spec: [sys.executable, "-c", script, str(spec)])


def _kwargs(tmp_path, seen: list, should_stop=lambda: False) -> dict:
    from engine.launch import ModelRef

    return dict(stage="train_grounder", kind="sft", work_dir=tmp_path / "w", output_dir=tmp_path / "out",
                rows=[{"prompt": "p", "completion": "c"}], settings=TrainSettings(), model=ModelRef("m"),
                reference=None, launch=LaunchSection(mode="accelerate", poll_s=0.1), on_log=seen.append,
                should_stop=should_stop)


def test_launch_failure_carries_the_output_tail(tmp_path, monkeypatch):
    _fake_launch(monkeypatch, "import sys; print('loading model...'); sys.exit('CUDA out of memory on rank 3')")
    from engine.launch import LaunchFailed, run_training

    with pytest.raises(LaunchFailed, match=r"(?s)exited with status 1.*CUDA out of memory on rank 3"):
        run_training(**_kwargs(tmp_path, []))


def test_launch_streams_logs_and_stop_terminates(tmp_path, monkeypatch):
    from engine.errors import StageStopped
    from engine.launch import run_training

    script = ("import json, os, sys, time; spec = json.load(open(sys.argv[1]))\n"
              "open(spec['log'] + '.pid', 'w').write(str(os.getpid()))\n"
              "for step in range(1, 1000):\n"
              "    open(spec['log'], 'a').write(json.dumps({'step': step, 'loss': 1.0 / step}) + '\\n')\n"
              "    time.sleep(0.05)\n")
    _fake_launch(monkeypatch, script)
    seen: list = []
    with pytest.raises(StageStopped):
        run_training(**_kwargs(tmp_path, seen, should_stop=lambda: len(seen) >= 3))
    assert seen[0] == {"step": 1, "loss": 1.0} and [s["step"] for s in seen] == list(range(1, len(seen) + 1))
    pid = int((tmp_path / "w" / "train_log.jsonl.pid").read_text())
    with pytest.raises(ProcessLookupError):  # terminated and reaped before StageStopped reached us
        os.kill(pid, 0)


def test_launch_success_without_checkpoint_fails(tmp_path, monkeypatch):
    _fake_launch(monkeypatch, "print('nothing to do')")
    from engine.launch import LaunchFailed, run_training

    with pytest.raises(LaunchFailed, match="wrote no checkpoint"):
        run_training(**_kwargs(tmp_path, []))


def test_the_launched_worker_gets_this_process_thread_share(tmp_path, monkeypatch):
    """Unless OMP_NUM_THREADS is set, the ranks split this process's torch threads (the share ``engine.threads``
    chose: e.g. a core left to the studio's web server) instead of each taking every core."""
    from engine.launch import LaunchFailed, run_training, worker_environment

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        assert worker_environment(LaunchSection(num_processes=2), {})["OMP_NUM_THREADS"] == "2"
        assert worker_environment(LaunchSection(num_processes=8), {})["OMP_NUM_THREADS"] == "1"
        assert worker_environment(LaunchSection(num_processes=2), {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
        env = worker_environment(LaunchSection(), {"PYTHONPATH": "/elsewhere"})
        assert env["OMP_NUM_THREADS"] == "4" and env["PYTHONPATH"] == f"{ROOT}{os.pathsep}/elsewhere"
        # ...and the subprocess really runs with it
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        torch.set_num_threads(3)
        _fake_launch(monkeypatch, "import json, os, sys; spec = json.load(open(sys.argv[1]))\n"
                                  "line = json.dumps({'omp': os.environ['OMP_NUM_THREADS']})\n"
                                  "open(spec['log'], 'w').write(line + '\\n')")
        seen: list = []
        with pytest.raises(LaunchFailed, match="wrote no checkpoint"):
            run_training(**_kwargs(tmp_path, seen))
        assert seen == [{"omp": "3"}]
    finally:
        torch.set_num_threads(threads)


def test_a_training_worker_exits_when_the_engine_that_launched_it_is_gone():
    """The launch runs in its own session, so a SIGKILLed engine cannot take it down: the worker's ``should_stop``
    notices the missing parent and exits (status 3, no checkpoint) instead of racing the resumed run."""
    import subprocess

    from engine.train_worker import parent_watch

    assert parent_watch(None)() is False and parent_watch(os.getpid())() is False  # alive (or unknown): train on
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    out = subprocess.run([sys.executable, "-c", f"from engine.train_worker import parent_watch\n"
                          f"parent_watch({gone.pid})()\nprint('still training')"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "still training" not in out.stdout, out.stderr


@pytest.mark.slow
def test_two_cpu_processes_reach_the_loss_of_one_with_the_same_global_batch(tmp_path, tiny_agents_dir, demo_tasks):
    """``launch.mode = "accelerate"`` with 2 processes (DDP over gloo on the CPU, examples/accelerate/cpu_ddp.yaml),
    1 row per process per step, against 1 process with 2 rows per step: same rows, same seed, so each step's
    global batch holds the same rows, and transformers averages the loss over the tokens of all devices: the
    per-step losses agree to float rounding (measured 1e-7 relative; tolerance 1e-5). Both workers must report
    their steps (a launcher that silently starts one process would otherwise pass)."""
    from engine import prompts
    from engine.config import TrainSettings
    from engine.launch import ModelRef, run_training

    rows = []
    for task in [t for t in demo_tasks if t.split == "train"][:12]:
        prompt, completion = prompts.prompt_and_completion(
            prompts.grounder_messages(task, task.gold_subgoals, task.gold_actions))
        rows.append({"prompt": prompt, "completion": completion.removesuffix("</s>")})
    losses = {}
    for name, processes, per_device in (("one", 1, 2), ("two", 2, 1)):
        settings = TrainSettings(learning_rate=1e-3, max_steps=4, batch_size=per_device, max_length=256,
                                 logging_steps=1, seed=3, bf16="false")
        config = "single_process.yaml" if processes == 1 else "cpu_ddp.yaml"
        launch = LaunchSection(mode="accelerate", accelerate_config=str(ROOT / "examples" / "accelerate" / config),
                               num_processes=processes, poll_s=0.2)
        seen: list[dict] = []
        ranks: list[dict[int, int]] = []
        run_training(stage="train_grounder", kind="sft", work_dir=tmp_path / name / "w",
                     output_dir=tmp_path / name / "out", rows=rows, settings=settings,
                     model=ModelRef(str(tiny_agents_dir / "grounder")), reference=None, launch=launch,
                     on_log=seen.append, should_stop=lambda: False, on_ranks=ranks.append)
        assert ranks and ranks[-1] == {rank: 4 for rank in range(processes)}  # every worker's progress is seen
        losses[name] = [line["loss"] for line in seen if "loss" in line]
        assert (tmp_path / name / "out" / "config.json").is_file()
    assert len(losses["one"]) == len(losses["two"]) == 4
    assert losses["two"] == pytest.approx(losses["one"], rel=1e-5)
    assert losses["one"][-1] < losses["one"][0]  # it trained
