"""Every test gets its own user folders, so no test reads or writes the real ~/.config or ~/.local."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# One BLAS thread, as the server runs (memory_server.cli): a threaded product splits the rows where it likes, and
# tests compare scores bit for bit. Set before numpy loads.
assert "numpy" not in sys.modules, "numpy was imported before tests/conftest.py could set OPENBLAS_NUM_THREADS"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def user_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point every user folder the server may touch into the test's own temporary folder."""
    folders = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    for name, value in folders.items():
        Path(value).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, value)
    for name in ("MEMORY_FILE_PATH", "MEMORY_CONTEXTS_DIR", "MEMORY_DEFAULT_CONTEXT", "MEMORY_PROJECT_DIR"):
        monkeypatch.delenv(name, raising=False)
    return folders
