"""Finding the project a directory belongs to, by walking up to the nearest folder with a project marker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memory_server.errors import MemoryServerError

DEFAULT_MARKERS: tuple[str, ...] = (
    ".git",  # a folder, or the file a git worktree has instead
    ".hg",
    ".svn",
    "pyproject.toml",
    "package.json",
    "Cargo.toml",
    "go.mod",
    "pom.xml",
    "build.gradle",
    "CMakeLists.txt",
    "composer.json",
    "Gemfile",
    ".ai-memory.jsonl",
)
DEFAULT_MAX_DEPTH = 5


@dataclass(frozen=True)
class Project:
    root: Path
    marker: str


class ProjectNotFoundError(MemoryServerError, LookupError):
    def __init__(self, context: str, start: Path, origin: str, tried: Sequence[Path], markers: Sequence[str]) -> None:
        super().__init__(context)
        self.context = context
        self.start = start
        self.origin = origin
        self.tried = list(tried)
        self.markers = list(markers)

    def __str__(self) -> str:
        tried = ", ".join(str(p) for p in self.tried)
        return (
            f"No project found for context '{self.context}': starting from {self.start} ({self.origin}), "
            f"none of these folders has a project marker: {tried}. Markers looked for: {', '.join(self.markers)}. "
            "Open a project folder in your client, set MEMORY_PROJECT_DIR, pass projectDir to this call, "
            "or switch to another context with set_active_context."
        )


def find_project(
    start: Path,
    markers: Sequence[str] = DEFAULT_MARKERS,
    max_depth: int = DEFAULT_MAX_DEPTH,
    *,
    context: str = "project",
    origin: str = "the start folder",
) -> Project:
    """The nearest folder at or above `start` (at most `max_depth` levels up) that holds one of `markers`.

    Rules, in order: the start folder is resolved to its real path (symlinks followed, as `git` does); each
    folder from there upwards is checked for the markers in the order given, and the first hit wins, so a nested
    project shadows the one around it. Raises ProjectNotFoundError listing the folders tried.
    """
    folder = start.expanduser().resolve()
    tried: list[Path] = []
    for _ in range(max_depth + 1):
        tried.append(folder)
        for marker in markers:
            if (folder / marker).exists():
                return Project(folder, marker)
        if folder.parent == folder:
            break
        folder = folder.parent
    raise ProjectNotFoundError(context, start, origin, tried, markers)
