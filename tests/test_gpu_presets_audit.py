"""GPU-path audit: the presets' data fill their evaluated splits, the files an accelerate launch reads are checked
before a run starts (``engine.config_checks.check_launch_files``), and ``experiment --jobs N`` refuses a launch of
more ranks than the one GPU a job sees (``engine.jobs.check_launches``). Nothing here loads a model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import jobs
from engine.config import LaunchSection, load_config, locate_error
from engine.config_checks import check_launch_files
from engine.errors import ConfigError
from engine.experiment import Experiment, load_experiment
from engine.runner import PlannedRun
from engine.runtime import check_eval_splits, data_sources, load_run_tasks

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "examples").glob("*.toml"))
# The carried real sample (tests/data/samples) placed at each file name a preset gives under data/ (files that are
# not shipped: the paper's downloads). SVAMP.json is written as the JSON array SVAMP distributes.
SAMPLE_FOR = {"lumos_maths_plan_onetime.jsonl": "lumos_derived_maths_plan_onetime.jsonl",
              "lumos_maths_ground_onetime.jsonl": "lumos_derived_maths_ground_onetime.jsonl",
              "gsm8k_test.jsonl": "gsm8k_test.jsonl",
              "SVAMP.json": "svamp.jsonl"}


def _named_files(config) -> list[str]:
    """Every data file the run reads before or during its stages."""
    named = [path for source in data_sources(config) for path in (source.path, source.ground) if path]
    return named + [path for path in (config.sft.original_data, config.data.exclude_tasks) if path]


def _place(named: str, into: Path, samples_dir: Path) -> None:
    """Put the file a preset names at the same relative path under ``into``: the repository's own file when it
    ships one, else the carried sample for its name."""
    assert not Path(named).is_absolute(), f"a preset names an absolute path: {named}"
    target = into / named
    target.parent.mkdir(parents=True, exist_ok=True)
    if (ROOT / named).is_file():
        shutil.copyfile(ROOT / named, target)
    elif Path(named).name in SAMPLE_FOR:
        sample = samples_dir / SAMPLE_FOR[Path(named).name]
        if named.endswith(".json"):
            records = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
            target.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
        else:
            shutil.copyfile(sample, target)
    else:
        pytest.fail(f"a preset names {named}, which is neither in the repository nor mapped to a sample in "
                    "SAMPLE_FOR")


@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_every_preset_loads_its_tasks_and_fills_every_evaluated_split(preset, samples_dir, tmp_path, monkeypatch):
    """With real records at the paths it names (relative to the directory it is run from, as the engine reads
    them), a preset's run has train tasks and a task in every split ``evaluate.splits`` names: the check a new run
    makes before anything is written (``engine.loop.check_new_run``), without its model checks."""
    config = load_config(preset)
    for named in _named_files(config):
        _place(named, tmp_path, samples_dir)
    monkeypatch.chdir(tmp_path)
    tasks = load_run_tasks(config)
    check_eval_splits(config, tasks)
    assert any(t.split == "train" for t in tasks)


@pytest.mark.parametrize("preset", ["gpu-24gb.toml", "gpu-8x.toml"])
def test_the_gpu_presets_read_the_papers_data(preset):
    """Trained on the Lumos maths files, evaluated on GSM8K (held-in) and SVAMP (held-out), as examples/paper.toml."""
    paper = load_config(ROOT / "examples" / "paper.toml")
    config = load_config(ROOT / "examples" / preset)
    assert config.data.sources == paper.data.sources
    assert config.evaluate.splits == ["held_in", "held_out"]


# -- launch.accelerate_config, checked before a run starts ---------------------------------------------------------

def _launch_toml(tmp_path: Path, accelerate_config: str, extra_args: list[str] | None = None) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nname = "x"\n\n[launch]\nmode = "accelerate"\naccelerate_config = '
                    f'{json.dumps(accelerate_config)}\nextra_args = {json.dumps(extra_args or [])}\n',
                    encoding="utf-8")
    return path


def _located_error(path: Path) -> str:
    """The message the CLI prints for the config at ``path`` (``FILE:LINE: field: ...``)."""
    with pytest.raises(ConfigError) as info:
        check_launch_files(load_config(path))
    return str(locate_error(info.value, path))


def test_a_missing_accelerate_config_is_refused_naming_the_file_line_and_field(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _launch_toml(tmp_path, "accelerate/missing.yaml")
    message = _located_error(path)
    assert message.startswith(f"{path}:6: launch.accelerate_config: no accelerate config file accelerate/missing.yaml")
    assert f"read from the current directory, {tmp_path}" in message


def test_a_relative_accelerate_config_is_read_from_the_current_directory(tmp_path, monkeypatch):
    """The shipped path passes from the repository root, as the presets say to run them, and is refused from
    elsewhere (the launch would not find it either: ``engine.launch`` passes it unchanged)."""
    path = _launch_toml(tmp_path, "examples/accelerate/single_process.yaml")
    monkeypatch.chdir(ROOT)
    check_launch_files(load_config(path))
    monkeypatch.chdir(tmp_path)
    assert "no accelerate config file examples/accelerate/single_process.yaml" in _located_error(path)


def test_the_inprocess_mode_reads_no_launch_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_launch_files(load_config(None, ["launch.accelerate_config=nowhere.yaml"]))


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("bad.yaml", "distributed_type: NO\nnum_processes: [1\n", "bad.yaml:3: not valid YAML"),
    ("bad.json", '{"distributed_type": "NO",\n "num_processes": }\n', "bad.json:2: not valid JSON"),
    ("list.yaml", "- distributed_type\n", "expected a mapping of accelerate settings, got list"),
    ("typo.yaml", "distributed_type: NO\nnum_proceses: 1\n", "accelerate cannot use it"),
    ("kind.yaml", "distributed_type: DEEPSPEEDD\n", "accelerate cannot use it"),
    ("ds.json", '{"zero_optimization": {"stage": 2}}', "ds.json is a DeepSpeed config, not an accelerate config"),
])
def test_an_accelerate_config_that_does_not_parse_is_refused(tmp_path, monkeypatch, name, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text, encoding="utf-8")
    message = _located_error(_launch_toml(tmp_path, name))
    assert message.startswith(f"{tmp_path / 'run.toml'}:6: launch.accelerate_config: ") and expected in message


def test_an_accelerate_config_in_json_is_accepted(tmp_path, monkeypatch):
    """accelerate reads a ``.json`` config file as JSON (``load_config_from_file``); so does the check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one.json").write_text('{"distributed_type": "NO", "num_processes": 1}', encoding="utf-8")
    check_launch_files(load_config(_launch_toml(tmp_path, "one.json")))


def test_a_deepspeed_launch_without_deepspeed_is_refused(tmp_path, monkeypatch):
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "is_deepspeed_available", lambda: False)
    monkeypatch.chdir(ROOT)
    message = _located_error(_launch_toml(tmp_path, "examples/accelerate/zero2.yaml"))
    assert "launch.accelerate_config: examples/accelerate/zero2.yaml trains with DeepSpeed" in message
    assert "pip install deepspeed" in message
    # --use_deepspeed on the command line asks for it as well: the field to change is extra_args (line 7)
    message = _located_error(_launch_toml(tmp_path, "examples/accelerate/single_process.yaml", ["--use_deepspeed"]))
    assert message.startswith(f"{tmp_path / 'run.toml'}:7: launch.extra_args: ") and "pip install deepspeed" in message


def test_the_deepspeed_json_an_accelerate_config_names_must_exist_and_parse(tmp_path, monkeypatch):
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "is_deepspeed_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                        "  deepspeed_config_file: ds.json\n", encoding="utf-8")
    path = _launch_toml(tmp_path, "zero.yaml")
    missing = "zero.yaml: deepspeed_config.deepspeed_config_file: no DeepSpeed config file ds.json"
    assert missing in _located_error(path)
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2},\n}', encoding="utf-8")
    assert "deepspeed_config_file: ds.json:2: not valid JSON" in _located_error(path)
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}', encoding="utf-8")
    check_launch_files(load_config(path))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples" / "accelerate").glob("*.yaml")))
def test_every_shipped_accelerate_config_passes_from_the_repository_root(name, tmp_path, monkeypatch):
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "is_deepspeed_available", lambda: True)  # the GPU machine's install
    monkeypatch.chdir(ROOT)
    check_launch_files(load_config(_launch_toml(tmp_path, f"examples/accelerate/{name}")))


# -- experiment --jobs N: one GPU per job ---------------------------------------------------------------------------

@pytest.fixture
def launch_experiment(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(f'[experiment]\nname = "gpus"\nbase = {json.dumps(str(ROOT / "examples" / "demo.toml"))}\n'
                    'seeds = [1, 2]\niterations = 1\n\n'
                    '[variants.inprocess]\nset = []\n\n'
                    '[variants.ddp]\nset = ["launch.mode=accelerate", '
                    '"launch.accelerate_config=examples/accelerate/cpu_ddp.yaml", "launch.num_processes=2"]\n\n'
                    '[variants.one]\nset = ["launch.mode=accelerate", "launch.num_processes=1", '
                    '"launch.extra_args=[\\"--main_process_port\\", \\"29501\\"]"]\n', encoding="utf-8")
    return load_experiment(path)


def _plans(variant: str, todo: list[tuple[int, str]]) -> list[PlannedRun]:
    return [PlannedRun(variant, seed, f"gpus/{variant}/s{seed}", None, False, len(todo), None, list(todo))
            for seed in (1, 2)]


TRAINING = [(1, "sample"), (1, "train_planner"), (1, "evaluate")]


def test_jobs_refuse_a_launch_of_more_ranks_than_a_job_has_gpus(launch_experiment):
    with pytest.raises(ConfigError) as info:
        jobs.check_launches(launch_experiment, _plans("ddp", TRAINING), 1, 2, ["0", "1"])
    message = str(info.value)
    assert info.value.field == "variants.ddp" and str(launch_experiment.source) in message
    assert "launch.num_processes: 2 training processes, but each of the experiment's jobs sees 1 GPU" in message
    assert "--jobs 1" in message


def test_jobs_let_a_launch_run_where_it_fits(launch_experiment):
    """No GPU (nothing pinned: CPU ranks), a run with no training left, one rank, or in-process training."""
    assert jobs.check_launches(launch_experiment, _plans("ddp", TRAINING), 1, 2, []) == []
    assert jobs.check_launches(launch_experiment, _plans("ddp", [(1, "evaluate")]), 1, 2, ["0", "1"]) == []
    assert jobs.check_launches(launch_experiment, _plans("inprocess", TRAINING), 1, 2, ["0", "1"]) == []


def test_jobs_caution_against_a_fixed_port_for_concurrent_launches(launch_experiment):
    cautions = jobs.check_launches(launch_experiment, _plans("one", TRAINING), 1, 2, ["0", "1"])
    assert len(cautions) == 1 and "variants.one: launch.extra_args fixes --main_process_port 29501" in cautions[0]
    assert "--main_process_port 0" in cautions[0]
    assert jobs.check_launches(launch_experiment, _plans("one", TRAINING), 1, 1, ["0"]) == []  # one job at a time


@pytest.mark.parametrize(("args", "port"), [(["--main_process_port", "29501"], "29501"),
                                            (["--main_process_port=29502"], "29502"),
                                            (["--main_process_port", "0"], None), ([], None)])
def test_a_fixed_port_is_read_in_both_spellings(args, port):
    launch = LaunchSection(mode="accelerate", extra_args=args,
                           accelerate_config=str(ROOT / "examples" / "accelerate" / "single_process.yaml"))
    assert (jobs._fixed_port(launch) or (None,))[0] == port


def _port_experiment(tmp_path: Path, variants: dict[str, tuple[str, list[str]]]) -> Experiment:
    """An experiment whose variants launch through accelerate, each with (its accelerate config's text, extra_args)."""
    text = (f'[experiment]\nname = "ports"\nbase = {json.dumps(str(ROOT / "examples" / "demo.toml"))}\n'
            "seeds = [1, 2]\niterations = 1\n")
    for name, (yaml_text, extra_args) in variants.items():
        (tmp_path / f"{name}.yaml").write_text(yaml_text, encoding="utf-8")
        sets = ["launch.mode=accelerate", "launch.num_processes=1",
                f"launch.accelerate_config={tmp_path / f'{name}.yaml'}", f"launch.extra_args={json.dumps(extra_args)}"]
        text += f"\n[variants.{name}]\nset = {json.dumps(sets)}\n"
    (tmp_path / "exp.toml").write_text(text, encoding="utf-8")
    return load_experiment(tmp_path / "exp.toml")


def test_jobs_caution_against_a_port_the_accelerate_config_fixes(tmp_path):
    """``main_process_port:`` in the accelerate config file fixes the port as much as ``--main_process_port`` in
    ``launch.extra_args`` (which only the latter cautioned against); 0 or absent leaves accelerate a free port, and
    the command line's argument, which accelerate prefers to the file's, decides when both say."""
    single = "distributed_type: NO\nnum_processes: 1\n"
    exp = _port_experiment(tmp_path, {
        "filed": (single + "main_process_port: 29600\n", []),
        "zero": (single + "main_process_port: 0\n", []),
        "absent": (single, []),
        "freed": (single + "main_process_port: 29600\n", ["--main_process_port", "0"]),
        "both": (single + "main_process_port: 29600\n", ["--main_process_port=29501"])})
    for variant in ("zero", "absent", "freed"):
        assert jobs.check_launches(exp, _plans(variant, TRAINING), 1, 2, ["0", "1"]) == [], variant
    (caution,) = jobs.check_launches(exp, _plans("filed", TRAINING), 1, 2, ["0", "1"])
    assert (f"variants.filed: launch.accelerate_config {tmp_path / 'filed.yaml'} sets main_process_port: 29600: the "
            "training launches of 2 concurrent jobs may contend for it") in caution
    assert "main_process_port: 0 in the accelerate config" in caution
    (caution,) = jobs.check_launches(exp, _plans("both", TRAINING), 1, 2, ["0", "1"])
    assert "variants.both: launch.extra_args fixes --main_process_port 29501:" in caution
    assert jobs.check_launches(exp, _plans("filed", TRAINING), 1, 1, ["0"]) == []  # one job at a time


def test_run_parallel_refuses_before_it_starts_a_worker(launch_experiment, monkeypatch, tmp_path):
    monkeypatch.setattr(jobs, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(jobs, "_start", lambda *a, **k: pytest.fail("a worker was started"))
    store = SimpleNamespace(path=tmp_path / "main.duckdb")  # refused before the store is used
    with pytest.raises(ConfigError, match="launch.num_processes: 2 training processes"):
        jobs.run_parallel(store, launch_experiment, _plans("ddp", TRAINING), 1, 2)
    assert not jobs.jobs_dir(store.path).exists()


def test_run_refuses_a_missing_accelerate_config_before_writing_anything(tmp_path, monkeypatch, capsys):
    """``run`` checks the launch files with the other pre-run checks (``engine.loop.check_new_run``): exit 2 naming
    the file, line and field, no store written; before, the run went through sample, score and pairs and failed at
    train_planner, where ``--set`` on resume may not change the path."""
    from engine.__main__ import main

    monkeypatch.chdir(ROOT)  # the demo data and agents the rest of the config names are found
    path = _launch_toml(tmp_path, "accelerate/zer02.yaml")
    db = tmp_path / "s.duckdb"
    code = main(["run", "--config", str(path), "--db", str(db), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:6: launch.accelerate_config: no accelerate config file accelerate/zer02.yaml" in err
    assert not db.exists()
