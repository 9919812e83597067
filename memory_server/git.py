"""Where git keeps a work tree's repository: the `.git` folder or file, a linked worktree's own folder, the common
folder every worktree shares, and the main checkout.

Read from the files git itself reads (`.git`, `gitdir: …`, `commondir`), never by running `git`: this is
consulted at every lock and every project resolution, where spawning a process would cost more than the write,
and a user's machine may have no `git` at all. Environment variables such as `GIT_DIR` are ignored on purpose:
two processes looking at one file must reach the same answer whatever their environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GitCheckout:
    top: Path  # the folder holding `.git`: the top of this work tree
    git_dir: Path  # this work tree's own git folder (`.git`, or `<common>/worktrees/<name>` for a linked worktree)
    common_dir: Path  # the folder every worktree of the repository shares (objects, refs, config)

    @property
    def main_checkout(self) -> Path:
        """The repository's main work tree, the same folder from every linked worktree.

        As `git worktree list` works it out: the common folder without its trailing `.git`. A bare repository
        (or a separate git folder not named `.git`) has no main checkout; its common folder stands in for it.
        A submodule, whose git folder lives in the superproject, is its own main checkout.
        """
        if self.git_dir == self.common_dir:
            return self.top
        return self.common_dir.parent if self.common_dir.name == ".git" else self.common_dir


def find_checkout(folder: Path, stop: Path | None = None) -> GitCheckout | None:
    """The git work tree `folder` lies in: the nearest folder at or above it with a usable `.git`.

    `stop` (excluded) ends the walk early. A `.git` that is neither a folder nor a `gitdir:` file pointing at one
    ends the walk with None, as it would confuse git too.
    """
    current, end = os.path.abspath(folder), str(stop) if stop is not None else None
    while current != end:  # plain strings: this runs at every lock, pathlib would cost more than the stats
        marker = os.path.join(current, ".git")
        if os.path.lexists(marker):
            return _checkout_at(Path(current), Path(marker))
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    return None


def _checkout_at(top: Path, marker: Path) -> GitCheckout | None:
    if marker.is_dir():
        git_dir = marker
    else:
        pointed = _read_line(marker)
        if pointed is None or not pointed.startswith("gitdir:"):
            return None
        git_dir = top / pointed.removeprefix("gitdir:").strip()
    git_dir = Path(os.path.realpath(git_dir))
    if not git_dir.is_dir():
        return None
    common = _read_line(git_dir / "commondir")
    common_dir = Path(os.path.realpath(git_dir / common)) if common else git_dir
    if not common_dir.is_dir():
        return None
    return GitCheckout(Path(os.path.realpath(top)), git_dir, common_dir)


def _read_line(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            return file.readline(4096).strip() or None
    except (OSError, ValueError):
        return None
