"""Real git repositories for tests: `git` itself, run with a fixed identity and no user or system config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def git_env() -> dict[str, str]:
    """The environment git runs in: the test's HOME (conftest.py), a fixed author, and our console script on PATH
    (the merge driver git runs is `mcp-memory-contexts merge-driver …`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.com",
        GIT_CONFIG_NOSYSTEM="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    return env


def git(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, env=git_env())
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done


def new_repository(folder: Path) -> Path:
    """A repository with one empty commit on branch `main`; returns its real path."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "commit", "-q", "--allow-empty", "-m", "start")
    return folder.resolve()


def commit_file(repo: Path, name: str, text: str, message: str) -> None:
    (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


def porcelain(repo: Path) -> list[str]:
    """`git status --porcelain` with every untracked file listed, one entry per line."""
    return git(repo, "status", "--porcelain", "--untracked-files=all").stdout.splitlines()
