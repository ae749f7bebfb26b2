"""Model paths and checkpoints are checked before any stage runs (``engine.preflight``), with errors naming the field.

Tiny Llama checkpoints are built from a config in a tmp dir (hidden size 16, two layers) with the demo tokenizer;
each test breaks one copy of it.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.config import load_config
from engine.errors import CheckpointError, DataError
from engine.preflight import check_model, preflight

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test starts with no caution printed yet: the warn-once set is per process, so an earlier test (or a rerun
    in the same process) meeting the same caution would otherwise keep it off this test's stderr."""
    from engine import preflight as preflight_module

    monkeypatch.setattr(preflight_module, "_WARNED", set())


def demo_vocab() -> int:
    """How many tokens the committed demo tokenizer has (it changes when the demo agents are rebuilt)."""
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(ROOT / "assets" / "demo" / "planner"))


def build(out: Path, vocab_size: int | None = None, layers: int = 2, hidden: int = 16) -> Path:
    """A random tiny Llama saved with the demo tokenizer (embedding rows = its size unless ``vocab_size`` says)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size or demo_vocab(), hidden_size=hidden, intermediate_size=32,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         tie_word_embeddings=True, eos_token_id=1, pad_token_id=0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy(ROOT / "assets" / "demo" / "planner" / name, out / name)
    return out


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("models") / "good")


@pytest.fixture
def copy(good, tmp_path):
    """A fresh copy of the good checkpoint to break."""
    def make(name: str = "broken") -> Path:
        return Path(shutil.copytree(good, tmp_path / name))
    return make


def error_of(path: str | Path, adapter: str = "", device: str = "auto") -> CheckpointError:
    with pytest.raises(CheckpointError) as info:
        check_model(str(path), adapter, device, "planner")
    return info.value


def test_good_checkpoint_passes(good):
    check_model(str(good), "", "auto", "planner")
    check_model(str(ROOT / "assets" / "demo" / "grounder"), "", "auto", "grounder")


def test_missing_paths(tmp_path, good):
    err = error_of(tmp_path / "nope")
    assert (err.field, err.message) == ("planner.path", f"{tmp_path / 'nope'}: no such model directory")
    assert "no such model directory" in str(error_of("runs/does/not/exist"))
    (tmp_path / "file").write_text("x")
    assert "no such model directory" in str(error_of(tmp_path / "file"))
    (tmp_path / "empty").mkdir()
    assert "no config.json" in str(error_of(tmp_path / "empty"))
    err = error_of(good, adapter=str(tmp_path / "empty"))
    assert err.field == "planner.adapter" and "no adapter_config.json" in err.message


def test_config_without_weights(copy):
    broken = copy()
    (broken / "model.safetensors").unlink()
    assert "no weights (expected model.safetensors" in str(error_of(broken))
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    assert "unreadable weight file" in str(error_of(broken))
    for index in ("{truncated", "[]"):  # a shard index that is not JSON, or not an object: named, not a traceback
        (broken / "model.safetensors.index.json").write_text(index)
        err = error_of(broken)
        assert err.field == "planner.path" and "model.safetensors.index.json: not a weight index" in err.message


def test_weights_that_do_not_match_the_config(copy):
    wider = copy("wider")
    config = json.loads((wider / "config.json").read_text())
    (wider / "config.json").write_text(json.dumps({**config, "hidden_size": 32, "head_dim": 16}))
    err = error_of(wider)
    assert err.field == "planner.path" and "has shape" in err.message and "does not match its config" in err.message
    deeper = copy("deeper")
    (deeper / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    message = error_of(deeper).message
    assert "the weights lack 9 tensor(s) the config needs (model.layers.2." in message
    bogus = copy("bogus")
    (bogus / "config.json").write_text(json.dumps({**config, "model_type": "no-such-arch"}))
    assert "cannot build a causal LM from its config" in error_of(bogus).message


def test_tokenizer_larger_than_the_embeddings(tmp_path):
    small = build(tmp_path / "small", vocab_size=100)
    err = error_of(small)
    assert err.field == "planner.path"
    assert f"the tokenizer has {demo_vocab()} tokens but the model has 100 embedding rows" in err.message


def test_tokenizer_without_pad_token_falls_back_to_eos(copy, caplog):
    from engine.models import load_tokenizer

    broken = copy()
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None}))
    with caplog.at_level(logging.WARNING, logger="engine.models"):
        check_model(str(broken), "", "auto", "planner")
        tokenizer = load_tokenizer(str(broken))
    assert tokenizer.pad_token == tokenizer.eos_token == "</s>"
    assert "no pad token; padding with its EOS token '</s>'" in caplog.text
    (broken / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None, "eos_token": None}))
    assert "neither a pad token nor an EOS token" in error_of(broken).message
    (broken / "tokenizer.json").write_text("{broken")
    (broken / "tokenizer_config.json").write_text("{broken")
    assert "the tokenizer does not load" in error_of(broken).message


def test_missing_cuda_device(good):
    err = error_of(good, device="cuda:7")
    assert err.field == "planner.device" and "'cuda:7' requested" in err.message


def test_preflight_covers_grounder_critic_and_original_data(tmp_path, good):
    base = [f"planner.path={good}", f"grounder.path={good}"]
    preflight(load_config(None, base))
    with pytest.raises(CheckpointError, match=r"^grounder.path: .*no such model directory"):
        preflight(load_config(None, [*base, f"grounder.path={tmp_path / 'x'}"]))
    with pytest.raises(CheckpointError, match=r"^critic.model: "):
        preflight(load_config(None, [*base, "critic.backend=hf", f"critic.model={tmp_path / 'x'}"]))
    bad = tmp_path / "orig.jsonl"
    bad.write_text('{"id": "a"}\n')
    with pytest.raises(DataError, match=r"orig.jsonl:1: domain: missing required field"):
        preflight(load_config(None, [*base, f"sft.original_data={bad}"]))


def run_cli(db: Path, tmp_path: Path, *extra: str) -> int:
    return main(["run", "--db", str(db), "--quiet", "--config", "examples/demo.toml",
                 "--set", f"run.workdir={tmp_path / 'runs'}", *extra])


def test_cli_run_with_a_bad_model_writes_nothing(tmp_path, copy, capsys):
    from engine.store import Store

    broken = copy()
    (broken / "model.safetensors").unlink()
    db = tmp_path / "s.duckdb"
    assert run_cli(db, tmp_path, "--set", f"grounder.path={broken}") == 2
    err = capsys.readouterr().err  # located at the --set that gave the path (its value shown cut short)
    assert err.startswith("error: --set grounder.path=") and f": grounder.path: {broken}: no weights" in err
    assert run_cli(db, tmp_path, "--set", f"planner.path={tmp_path / 'nope'}") == 2
    assert "planner.path" in capsys.readouterr().err
    with Store(db) as store:
        assert store.list_runs() == []
    assert not (tmp_path / "runs").exists()


def test_resume_rechecks_the_models_before_any_stage(tmp_path, copy, capsys):
    from engine.loop import create_run
    from engine.store import Store

    moved = copy("planner")
    db = tmp_path / "s.duckdb"
    config = load_config(ROOT / "examples" / "demo.toml", [f"planner.path={moved}", f"run.workdir={tmp_path}"])
    with Store(db) as store:
        run_id = create_run(store, config)
    shutil.rmtree(moved)
    assert main(["run", "--db", str(db), "--quiet", "--run", run_id]) == 2
    assert "planner.path" in capsys.readouterr().err
    assert main(["run", "--db", str(db), "--quiet", "--run", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    with Store(db) as store:
        assert store.stage_status(run_id, 0) == {}


def test_a_tokenizer_chat_template_that_is_not_there_is_refused_naming_the_field(copy, good):
    """``chat_template = "tokenizer"`` with a tokenizer that has none (a raw pretrained checkpoint) used to create
    the run and fail its first stage with transformers' traceback; it is refused up front, naming the field."""
    check_model(str(good), "", "auto", "planner", chat_template="tokenizer")  # the demo tokenizer has a template
    bare = copy("bare")
    (bare / "chat_template.jinja").unlink()
    settings = json.loads((bare / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(settings))
    check_model(str(bare), "", "auto", "planner")  # the lumos layout needs no template
    with pytest.raises(CheckpointError) as info:
        check_model(str(bare), "", "auto", "grounder", chat_template="tokenizer")
    assert info.value.field == "grounder.chat_template"
    assert f"{bare} has none" in info.value.message and '"lumos"' in info.value.message
    with pytest.raises(CheckpointError, match=r"^planner.chat_template: "):
        preflight(load_config(None, [f"planner.path={bare}", f"grounder.path={good}",
                                     "planner.chat_template=tokenizer"]))


# -- cautions: a config that runs, but likely not as meant -----------------------------------------------------------

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def instruct(copy, name: str) -> Path:
    """A copy of the good checkpoint whose tokenizer has a ChatML template of its own, as an instruct model's has."""
    model = copy(name)
    (model / "chat_template.jinja").write_text(CHATML)
    return model


def test_an_instruct_tokenizer_kept_on_the_lumos_layout_is_warned_once_per_role(copy, capsys):
    """``chat_template = "lumos"`` (the default) with a tokenizer that lays prompts out its own way: one warning line
    per role on stderr, naming the field and the fix, printed once however often the config is checked (a ``run``
    creates the run and checks it again); a role set to ``"tokenizer"`` draws none, nor does the hf critic."""
    model = instruct(copy, "chatml")
    config = load_config(None, [f"planner.path={model}", f"grounder.path={model}"])
    cautions = preflight(config)
    assert [c.split(" = ")[0] for c in cautions] == ["planner.chat_template", "grounder.chat_template"]
    assert 'Set planner.chat_template = "tokenizer"' in cautions[0] and str(model) in cautions[0]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"warning: {c}" for c in cautions]
    assert preflight(config) == cautions and capsys.readouterr().err == ""  # said once
    assert preflight(load_config(None, [f"planner.path={model}", f"grounder.path={model}",
                                        "grounder.chat_template=tokenizer"])) == cautions[:1]
    assert check_model(str(model), "", "auto", "critic", path_field="critic.model", chat_template=None) == []


def test_the_demo_agents_lumos_template_draws_no_warning(good, capsys):
    """The committed demo agents' tokenizers carry the lumos layout as their template: nothing to warn about."""
    assert preflight(load_config(ROOT / "examples" / "demo.toml", [])) == []
    assert check_model(str(good), "", "auto", "planner") == []
    assert capsys.readouterr().err == ""


def test_the_warning_stays_off_a_commands_json_stdout(tmp_path, copy, capsys):
    """``run`` prints its JSON on stdout; the warning goes to stderr, once, though the run is checked twice."""
    model = instruct(copy, "chatml-cli")
    db = tmp_path / "s.duckdb"
    assert run_cli(db, tmp_path, "--iterations", "0", "--set", "stages.evaluate_initial=false", "--set",
                   f"planner.path={model}") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["status"] == "done"
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith('warning: planner.chat_template = "lumos": ')


def lumos_config(samples: Path, formulation: str, *extra: str):
    """The default config on the carried Lumos maths sample of ``formulation`` (planner and grounder files)."""
    plan, ground = (samples / f"lumos_derived_maths_{role}_{formulation}.jsonl" for role in ("plan", "ground"))
    return load_config(None, ["data.format=lumos", f"data.tasks={plan}", f"data.ground={ground}", *extra])


def test_lumos_iterative_records_sampled_onetime_are_warned(samples_dir, capsys):
    """Lumos iterative records with ``sample.formulation = "onetime"`` (the default): their steps are joined into one
    plan, so the warning names the file and ``sample.formulation = "iterative"``; iterative sampling, onetime records,
    or a GRPO run (onetime only, nothing to advise) draw none."""
    from engine.runtime import load_run_tasks

    config = lumos_config(samples_dir, "iterative")
    cautions = preflight(config, load_run_tasks(config))
    path = samples_dir / "lumos_derived_maths_plan_iterative.jsonl"
    ground = samples_dir / "lumos_derived_maths_ground_iterative.jsonl"  # named too: the records may be its
    assert cautions == [f'sample.formulation = "onetime": 10 train task(s) (lumos:maths) come from Lumos iterative '
                        f"records in data.tasks = {path}, data.ground = {ground}, whose steps are then joined into "
                        "one onetime plan per task, so the agents are not trained on the step-by-step turns and "
                        'executed results the records hold. Set sample.formulation = "iterative" to train on them as '
                        "recorded"]
    assert capsys.readouterr().err == f"warning: {cautions[0]}\n"
    config = lumos_config(samples_dir, "iterative", "sample.formulation=iterative")
    assert preflight(config, load_run_tasks(config)) == []
    config = lumos_config(samples_dir, "iterative", "stages.planner_objective=grpo")  # GRPO trains onetime only
    assert preflight(config, load_run_tasks(config)) == []
    config = lumos_config(samples_dir, "onetime")
    assert preflight(config, load_run_tasks(config)) == []
    assert capsys.readouterr().err == ""


def test_create_run_returns_every_caution_each_time_though_stderr_says_it_once(tmp_path, copy, capsys):
    """``create_run_with_cautions`` hands back the cautions of the run it created, whole on every call (the studio
    shows them to a visitor who never sees stderr), while the ``warning:`` line stays once per process; ``create_run``
    and ``check_new_run`` check the same way, the latter writing nothing."""
    from engine.loop import check_new_run, create_run, create_run_with_cautions
    from engine.store import Store

    model = instruct(copy, "chatml-create")
    config = load_config(ROOT / "examples" / "demo.toml", [f"planner.path={model}",
                                                           f"run.workdir={tmp_path / 'runs'}"])
    with Store(tmp_path / "s.duckdb") as store:
        tasks, checked = check_new_run(config)
        assert store.list_runs() == [] and not (tmp_path / "runs").exists()  # a check only
        first_id, first = create_run_with_cautions(store, config)
        second_id, second = create_run_with_cautions(store, config)  # already printed: still returned, whole
        plain = create_run(store, config)
        assert len({first_id, second_id, plain}) == 3 and len(store.list_runs()) == 3
        assert store.count("tasks", first_id) == len(tasks)
    assert first == second == checked and [c.split(" = ")[0] for c in first] == ["planner.chat_template"]
    assert capsys.readouterr().err.splitlines() == [f"warning: {first[0]}"]


def test_the_check_never_switches_the_process_default_dtype(copy, monkeypatch):
    """A model whose config names float16 (the demo agents' do) is built on the meta device without touching torch's
    default dtype: the studio checks a picked run's config while a job thread loads models, and a switch to float16
    in between gave that job half-float16 weights ("expected m1 and m2 to have the same dtype")."""
    import torch

    model = copy("half")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "dtype": "float16"}))
    switched = []
    real = torch.set_default_dtype
    monkeypatch.setattr(torch, "set_default_dtype", lambda dtype: switched.append(dtype) or real(dtype))
    preflight(load_config("examples/demo.toml", [f"planner.path={model}", f"grounder.path={model}"]))
    assert switched == [] and torch.get_default_dtype() == torch.float32


def test_report_to_names_transformers_integrations_and_their_packages_are_checked_up_front(tmp_path, good,
                                                                                          monkeypatch, capsys):
    """``report_to = "tensorboard"`` without tensorboard installed failed when the stage's trainer was built, after
    the iteration's sampling and scoring; a typo ("tensorbord") too. Both now stop the run before anything is
    written."""
    from transformers.integrations import integration_utils

    from engine.config_training import REPORT_TO
    from engine.errors import ConfigError
    from engine.store import Store

    assert set(REPORT_TO) == {"none", "all", *integration_utils.INTEGRATION_TO_CALLBACK}
    base = [f"planner.path={good}", f"grounder.path={good}"]
    with pytest.raises(ConfigError, match=r"dpo.report_to: 'tensorbord' is not one of .*did you mean 'tensorboard'"):
        load_config(None, [*base, "dpo.report_to=tensorbord"])
    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: ["wandb"])
    preflight(load_config(None, [*base, "sft.report_to=wandb", "dpo.report_to=all"]))
    with pytest.raises(ConfigError, match=r"^sft.report_to: tensorboard: its package is not installed .*"
                                          r"\(installed: wandb\)"):
        preflight(load_config(None, [*base, "sft.report_to=tensorboard"]))
    db = tmp_path / "s.duckdb"
    assert run_cli(db, tmp_path, "--set", "grpo.report_to=mlflow") == 2
    assert "grpo.report_to: mlflow: its package is not installed" in capsys.readouterr().err
    with Store(db) as store:
        assert store.list_runs() == []
    assert not (tmp_path / "runs").exists()


def test_a_vllm_backend_without_vllm_is_refused_before_the_run_even_when_a_phase_asks(good, monkeypatch):
    """``ground.backend = "vllm"`` without the package failed when the ground stage started: after the iteration's
    sampling, scoring, pairs and DPO. A curriculum phase that switches to it (or to a logger) is checked too."""
    import json

    from transformers.integrations import integration_utils

    from engine import vllm_backend
    from engine.errors import ConfigError

    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: False)  # whatever this machine has installed
    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: [])
    base = [f"planner.path={good}", f"grounder.path={good}"]
    with pytest.raises(ConfigError, match=r"^ground.backend: 'vllm' needs the vLLM package, which is not installed"):
        preflight(load_config(None, [*base, "ground.backend=vllm"]))
    phases = [{"name": "a", "iterations": 1}, {"name": "b", "set": ["sample.backend=vllm"]}]
    with pytest.raises(ConfigError, match=r"^sample.backend: 'vllm' \(set by schedule.phases\[2\]\) needs the vLLM"):
        preflight(load_config(None, [*base, "schedule.phases=" + json.dumps(phases)]))
    phases[1]["set"] = ["sft.report_to=wandb"]
    with pytest.raises(ConfigError, match=r"^sft.report_to: wandb \(set by schedule.phases\[2\]\): its package"):
        preflight(load_config(None, [*base, "schedule.phases=" + json.dumps(phases)]))
    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: True)
    preflight(load_config(None, [*base, "ground.backend=vllm"]))  # installed: nothing to say
