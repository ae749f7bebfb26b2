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
