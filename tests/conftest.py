"""Shared pytest fixtures. Other engineers add their fixtures here; keep each one small and documented."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def samples_dir() -> Path:
    """The shared real-data samples (``<repo>/../shared/samples``, else /work/shared/samples); skip if absent."""
    for candidate in (Path(__file__).resolve().parents[2] / "shared" / "samples", Path("/work/shared/samples")):
        if candidate.is_dir():
            return candidate
    pytest.skip("shared samples folder not found")
