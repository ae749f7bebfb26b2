"""Nothing is lost: a run SIGKILLed inside any stage resumes (``python -m engine run --run``) to exactly the rows of
an uninterrupted run on the same seed, and an uninterrupted run is itself reproducible across processes.

Kills are placed by progress, not by time: ``MOAT_KILL_AT=<iteration>:<stage>:<point>`` makes the run SIGKILL
itself right after the stage's Nth progress report (N batches committed / N training log lines stored), or halfway
through writing a checkpoint (``save``); see ``engine.stages.context.crash_point``. Rows are compared by content,
without run ids, timestamps, latencies, trainer timings and absolute paths.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.dbutil import TABLES
from engine.loop import STAGES, create_run, run_loop, run_stage
from engine.store import Store

pytestmark = pytest.mark.slow  # kills and resumes runs of tiny models: `pytest -m "not slow"` leaves these out

ROOT = Path(__file__).resolve().parents[1]
# Columns that legitimately differ between two runs of the same config: ids, clocks, and paths under the run dir.
VOLATILE = {"run_id", "created_at", "started_at", "finished_at", "earlier_s", "latency_s"}
# The 8 stages of an iteration, each killed once, in loop order; training is killed mid-training and mid-save.
KILLS = ["1:sample:1", "1:score:1", "1:pairs:1", "1:train_planner:save", "1:ground:1", "1:critique:1",
         "1:train_grounder:1", "1:evaluate:2"]


def _config(loop_config, workdir: Path):
    config = copy.deepcopy(loop_config)
    config.run.workdir = str(workdir)  # each store gets its own checkpoints
    return config


def _engine_run(db: Path, run_id: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("MOAT_KILL_AT", None)
    if kill_at:
        env["MOAT_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "engine", "run", "--db", str(db), "--run", run_id, "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _new_run(db: Path, config) -> str:
    with Store(db) as store:
        return create_run(store, config)


def _stable_logs(text: str) -> dict:
    """A trainer log line without its clock readings (runtime, samples per second, ...)."""
    logs = json.loads(text)
    return {k: v for k, v in logs.items() if "runtime" not in k and "per_second" not in k}


def snapshot(db: Path, run_id: str) -> dict[str, list[tuple]]:
    """Every row of the run, table by table, as sorted tuples of its stable columns."""
    out: dict[str, list[tuple]] = {}
    with Store(db) as store:
        run_dir = str(Path(store.get_run(run_id)["run_dir"]) / run_id)
        for table in TABLES:
            if "run_id" not in store.columns(table) or table == "runs":
                continue
            frame = store.frame(table, run_id)
            cols = [c for c in frame.columns if c not in VOLATILE]
            rows = []
            for record in frame[cols].astype(object).where(frame[cols].notna(), None).to_dict("records"):
                if table == "train_logs":
                    record["logs_json"] = _stable_logs(record["logs_json"])
                if table == "checkpoints":
                    record["path"] = record["path"].replace(run_dir, "<run_dir>")
                if table == "stages":
                    counts = json.loads(record["counts_json"] or "{}")
                    counts.pop("new_rows", None)  # how many the last attempt wrote, not what is stored
                    # Where an evaluation's rows came from, not what they are: its reuse key hashes the checkpoint
                    # files, and transformers writes the process's HF_HUB_OFFLINE into tokenizer_config.json, so a
                    # subprocess's key differs (a miss, never a wrong reuse); an evaluation killed after it stored
                    # its result is copied from that result on resume (engine.eval_cache). The rows are equal.
                    counts.pop("evaluation_key", None)
                    counts.pop("reused_from", None)
                    record["counts_json"] = counts
                rows.append(tuple(json.dumps(record[c], sort_keys=True, default=str) for c in cols))
            out[table] = sorted(rows)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory, loop_config):
    """An uninterrupted ``python -m engine run`` of the tiny loop: its store, run id and config."""
    base = tmp_path_factory.mktemp("reference")
    config = _config(loop_config, base / "runs")
    db = base / "ref.duckdb"
    run_id = _new_run(db, config)
    done = _engine_run(db, run_id)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "done"
    # --quiet: no bars of TRL's dataset tokenizing, nor of transformers' weight loading
    assert "examples/s]" not in done.stderr and "Loading weights" not in done.stderr, done.stderr[-3000:]
    return {"db": db, "run_id": run_id, "config": loop_config, "rows": snapshot(db, run_id)}


@pytest.fixture(scope="module")
def loop_config(tmp_path_factory, tiny_agents_dir, demo_tasks):
    """The conftest tiny loop, module-scoped so the reference run is made once for both tests."""
    from engine.config import load_config
    from engine.tasks import write_tasks
    from tests._tiny import tiny_overrides

    tmp = tmp_path_factory.mktemp("crash_loop")
    tasks_file = tmp / "tasks.jsonl"
    write_tasks(demo_tasks, tasks_file)
    return load_config(None, tiny_overrides(tmp, tiny_agents_dir, tasks_file))


def test_uninterrupted_run_is_reproducible_across_processes(tmp_path, reference):
    rows = reference["rows"]
    for table in ("plans", "scores", "pairs", "groundings", "verdicts", "train_logs", "metrics", "eval_traces"):
        assert rows[table], f"the tiny loop should write {table}"
    with Store(tmp_path / "again.duckdb") as store:  # this pytest process, not a subprocess
        run_id = create_run(store, _config(reference["config"], tmp_path / "runs"))
        assert run_loop(store, run_id) == "done"
    assert snapshot(tmp_path / "again.duckdb", run_id) == rows


def test_a_resumed_stage_samples_each_batch_with_its_uninterrupted_seed(tmp_path, loop_config):
    """The unit behind the crash test: a sample stage stopped after its first batch resumes with the later batches'
    own seeds (batches are cut from all tasks, not from what is left), so its plans equal an uninterrupted run's."""
    texts = []
    for name, stop_after in (("whole", None), ("resumed", 1)):
        with Store(tmp_path / f"{name}.duckdb") as store:
            run_id = create_run(store, _config(loop_config, tmp_path / name))
            if stop_after is not None:
                checks = iter(range(10**6))  # stop at the second check: after the first batch
                assert run_stage(store, run_id, 1, "sample", should_stop=lambda c=checks: next(c) > 0) == "stopped"
                assert 0 < store.count("plans", run_id, 1) < 12
            assert run_stage(store, run_id, 1, "sample") == "done"
            texts.append(store.frame("plans", run_id, 1)[["task_id", "step", "k", "text"]].values.tolist())
    assert texts[0] == texts[1]


def test_a_rerun_training_stage_discards_what_a_killed_attempt_left(tmp_path, loop_config):
    """A training stage killed after its checkpoint was written and recorded, but before "done", is re-run from
    scratch: the old directory, a temp directory and the row go, whatever the new attempt decides."""
    with Store(tmp_path / "s.duckdb") as store:
        run_id = create_run(store, _config(loop_config, tmp_path / "runs"))
        iter_dir = tmp_path / "runs" / run_id / "iter_01"
        for leftover in ("planner", "planner.partial-1", "planner.old"):
            (iter_dir / leftover).mkdir(parents=True)
            (iter_dir / leftover / "model.safetensors").write_bytes(b"stale")
        store.put_checkpoint(run_id, 1, "planner", iter_dir / "planner", "full")
        store.add_train_logs(run_id, 1, "train_planner", [{"step": 1, "loss": 9.0}])
        store.set_stage(run_id, 1, "train_planner", "running")  # as the killed process left it
        # No pairs in this store: the new attempt keeps the starting planner (and loads no model to say so).
        assert run_stage(store, run_id, 1, "train_planner") == "done"
        assert sorted(p.name for p in iter_dir.iterdir()) == []
        assert store.checkpoint(run_id, 1, "planner")["path"] == loop_config.planner.path
        assert store.count("train_logs", run_id, 1) == 0


# One driver process imports torch/transformers/trl once and forks a child per kill: each child reports what the
# previous kill left behind (stage states, the iteration's directory), then resumes the run with ``MOAT_KILL_AT``
# set and dies by SIGKILL. Forking saves ~5 s of imports per kill; the parent never opens DuckDB or runs torch, so
# no thread or lock is forked mid-use. The final resume is a real ``python -m engine run``.
DRIVER = """
import json, os, sys
from pathlib import Path
import engine.training  # torch, transformers, trl: imported once, inherited by every child
from engine.loop import run_loop
from engine.store import Store

db, run_id, iter_dir, kills = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]
for kill in kills:
    pid = os.fork()
    if pid == 0:
        os.environ["MOAT_KILL_AT"] = kill
        with Store(db) as store:
            found = {"states": {s: v["status"] for s, v in store.stage_status(run_id, 1).items()},
                     "files": sorted(str(p.relative_to(iter_dir)) for p in iter_dir.rglob("*")),
                     "checkpoints": store.frame("checkpoints", run_id)["role"].tolist()}
            print(json.dumps({"before": kill, **found}), flush=True)
            run_loop(store, run_id)
        os._exit(0)  # only reached if the kill point never came
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"after": kill, "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}), flush=True)
"""


def test_sigkill_in_every_stage_resumes_to_the_uninterrupted_rows(tmp_path, reference):
    db, workdir = tmp_path / "crash.duckdb", tmp_path / "runs"
    run_id = _new_run(db, _config(reference["config"], workdir))
    iter_dir = workdir / run_id / "iter_01"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("MOAT_KILL_AT", None)
    driver = subprocess.run([sys.executable, "-c", DRIVER, str(db), run_id, str(iter_dir), *KILLS], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=600)
    assert driver.returncode == 0, driver.stderr[-3000:]
    lines = [json.loads(line) for line in driver.stdout.splitlines() if line.startswith("{")]
    deaths = {r["after"]: r["signal"] for r in lines if "after" in r}
    assert deaths == {kill: signal.SIGKILL for kill in KILLS}, driver.stderr[-3000:]
    # What each kill left, as seen by the next process (the last one's: below, before the final resume).
    found = [r for r in lines if "before" in r][1:]
    with Store(db) as store:  # the killed process's lock is gone; DuckDB replays its WAL
        found.append({"states": {s: v["status"] for s, v in store.stage_status(run_id, 1).items()},
                      "files": sorted(str(p.relative_to(iter_dir)) for p in iter_dir.rglob("*")),
                      "checkpoints": store.frame("checkpoints", run_id)["role"].tolist()})
    assert len(found) == len(KILLS)
    order = list(STAGES)
    for kill_at, seen in zip(KILLS, found):
        _, stage, point = kill_at.split(":")
        states = seen["states"]
        assert states[stage] == "running", (kill_at, states)  # it died inside the stage ...
        assert all(states[s] == "done" for s in order[:order.index(stage)]), (kill_at, states)  # ... after these
        if point == "save":  # a half-written checkpoint: only in the temp dir, never in place, never recorded
            partial = [f for f in seen["files"] if f.startswith("planner.partial-")]
            assert any(f.endswith("/model.safetensors") for f in partial), seen
            assert not any(f.endswith("/tokenizer.json") for f in partial) and "planner" not in seen["files"], seen
            assert "planner" not in seen["checkpoints"], seen
    finished = _engine_run(db, run_id)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads(finished.stdout.strip().splitlines()[-1])["status"] == "done"
    assert not list(iter_dir.glob("*.partial*")) and not list(iter_dir.glob("*.old"))
    assert (iter_dir / "planner" / "tokenizer.json").exists()
    rows = snapshot(db, run_id)
    for table, expected in reference["rows"].items():
        assert rows[table] == expected, table
