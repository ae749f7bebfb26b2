"""The thread policy: torch's threads follow the cores this process may really use (affinity, cgroup quota,
OMP_NUM_THREADS), shared between processes and leaving room for a web server."""

from __future__ import annotations

import pytest
import torch

from engine import threads


@pytest.fixture
def keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cgroup_v2_and_v1_quotas_are_read(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_quota(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_quota(tmp_path) is None
    assert threads.cgroup_quota(tmp_path / "absent") is None


def test_usable_cores_take_the_tightest_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "affinity_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.usable_cores(tmp_path) == (8, 8, None, None)
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # 2.5 cores of quota: 3 threads can use it
    assert threads.usable_cores(tmp_path)[0] == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # an explicit setting wins
    assert threads.usable_cores(tmp_path) == (2, 8, 2.5, 2)


def test_apply_sets_torch_threads_and_says_why(tmp_path, monkeypatch, keep_torch_threads):
    monkeypatch.setattr(threads, "affinity_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    policy = threads.apply_thread_policy(share=2, reserve=2, root=tmp_path)
    assert policy.threads == 3 and torch.get_num_threads() == 3  # (8 - 2) // 2
    assert policy.describe() == ("torch threads 3 of 8 usable core(s) (affinity 8, cgroup quota none, "
                                 "OMP_NUM_THREADS unset)")
    assert threads.apply_thread_policy(share=4, reserve=8, root=tmp_path).threads == 1  # never below one


def test_threads_follow_the_cores_busy_elsewhere(tmp_path, monkeypatch, keep_torch_threads):
    """Two cores, one taken by another process: one torch thread (a demo iteration took 144 s so instead of 256 s,
    bench iteration --contention 1); a host-wide count is scaled to our share; OMP_NUM_THREADS is kept."""
    stat, own = tmp_path / "stat", tmp_path / "task"
    (own / "1").mkdir(parents=True)
    (own / "1" / "stat").write_text("1 (python (x)) R 0 1\n")  # the reader, running
    (own / "2").mkdir()
    (own / "2" / "stat").write_text("2 (python) S 0 1\n")  # a sleeping torch worker
    cpus = "cpu  1 2 3\ncpu0 1 2 3\ncpu1 1 2 3\n"
    stat.write_text(cpus + "procs_running 2\n")
    assert threads.busy_elsewhere(2, samples=3, interval_s=0, stat=stat, own=own) == 1
    stat.write_text(cpus + "procs_running 1\n")
    assert threads.busy_elsewhere(2, samples=3, interval_s=0, stat=stat, own=own) == 0
    host = "cpu  1\n" + "".join(f"cpu{i} 1\n" for i in range(8))
    stat.write_text(host + "procs_running 9\n")  # 8 busy on an 8-CPU host of which we may use 2: 2 of ours
    assert threads.busy_elsewhere(2, samples=1, interval_s=0, stat=stat, own=own) == 2
    assert threads.busy_elsewhere(2, stat=tmp_path / "missing", own=own) is None

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_applied", threads.ThreadPolicy(2, 2, 2, None, None))
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cores, stat: 1)
    adapted = threads.adapt_to_load()
    assert adapted.threads == 1 and torch.get_num_threads() == 1 and "1 busy elsewhere" in adapted.describe()
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cores, stat: 0)
    assert threads.adapt_to_load().threads == 2 and torch.get_num_threads() == 2  # back when the core is free
    monkeypatch.setattr(threads, "_applied", threads.ThreadPolicy(2, 2, 2, None, 2))
    monkeypatch.setattr(threads, "busy_elsewhere", lambda cores, stat: 2)
    assert threads.adapt_to_load().threads == 2  # an explicit OMP_NUM_THREADS is the caller's choice
