"""Finding the project a directory belongs to, by walking up to the nearest folder with a project marker, and
what a path template may say about that project: its name, a collision-free id, its repository's main checkout."""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from memory_server.errors import MemoryServerError, echo, listed
from memory_server.git import find_checkout

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
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Project:
    root: Path
    marker: str

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def id(self) -> str:
        """The folder's name and a short hash of its full path: two projects both called `api` get two ids."""
        digest = hashlib.sha256(str(self.root).encode("utf-8", "surrogateescape")).hexdigest()
        return f"{self.root.name}-{digest[:8]}"

    @property
    def repo_root(self) -> Path:
        """The main checkout of the git repository holding the project, the same folder from every linked
        worktree; the project folder itself when it is in no repository (a home folder's dotfile repository
        does not count)."""
        checkout = find_checkout(self.root, stop=_home())
        return checkout.main_checkout if checkout is not None else self.root


class ProjectNotFoundError(MemoryServerError, LookupError):
    def __init__(self, context: str, start: Path, origin: str, tried: Sequence[Path], markers: Sequence[str]) -> None:
        super().__init__(context)
        self.context = context
        self.start = start
        self.origin = origin
        self.tried = list(tried)
        self.markers = list(markers)

    def reason(self, brief: bool = False, origin: str | None = None) -> str:
        """Where the search started and why it found nothing, in one clause; `brief` names only the first and
        the last folder tried; `origin` says where the start folder came from in the reader's terms (the command
        line's `--project-dir` for MEMORY_PROJECT_DIR)."""
        origin = origin or self.origin
        if not self.tried and not self.start.expanduser().exists():
            return f"{self.start} ({origin}) no longer exists"
        if not self.tried:
            return f"{self.start} ({origin}) is {_never_a_project(self.start.expanduser().resolve())}"
        above = self.tried[-1].parent
        stopped = f"; the search stops at {above}, {_never_a_project(above)}" if _ends_walk(above, _home()) else ""
        if brief:
            span = f"{self.tried[0]}" + (f" up to {self.tried[-1]}" if len(self.tried) > 1 else "")
            return f"no project marker in {span} ({origin}){stopped}"
        tried = ", ".join(map(str, self.tried))
        return f"starting from {self.start} ({origin}), no folder has a project marker: {tried}{stopped}"

    def __str__(self) -> str:
        return (
            f"No project found for context '{self.context}': {self.reason()}. "
            f"Markers looked for: {listed(self.markers)}. "
            "Open a project folder in your client, set MEMORY_PROJECT_DIR, pass projectDir to this call, "
            "or switch to another context with set_active_context."
        )


class ProjectDirError(MemoryServerError, ValueError):
    """A projectDir that is neither a folder path nor a file:// URI."""

    def __init__(self, value: str, why: str = "is not a folder") -> None:
        super().__init__(value)
        self.value = value
        self.why = why

    def __str__(self) -> str:
        return (
            f"projectDir {echo(self.value)} {self.why}: give a path (absolute, or relative to the workspace) "
            "or a file:// URI."
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
    project shadows the one around it. The walk stops before the user's home folder and the file-system root:
    neither is ever a project (a home folder often holds a dotfile repository or a stray `package.json`, and a
    client with no workspace starts servers in one of them). Raises ProjectNotFoundError listing the folders tried.
    """
    folder = start.expanduser().resolve()
    home = _home()
    tried: list[Path] = []
    for _ in range(max_depth + 1):
        if _ends_walk(folder, home):
            break
        tried.append(folder)
        for marker in markers:
            if (folder / marker).exists():
                return Project(folder, marker)
        folder = folder.parent
    raise ProjectNotFoundError(context, start, origin, tried, markers)


def folder_from(value: str) -> Path:
    """A folder given as a path or as a `file://` URI (what clients send as workspace roots)."""
    if _URI.match(value):
        path = file_uri_path(value)
        if path is None:
            raise ProjectDirError(value)
    else:
        path = Path(value).expanduser()
    control = next((c for c in str(path) if unicodedata.category(c) == "Cc"), None)
    if control is not None:  # a NUL would make every file operation on it fail; no folder is named so
        raise ProjectDirError(value, f"holds the control character {control!r}")
    return path


def file_uri_path(uri: str) -> Path | None:
    """The local path of a `file://` URI (percent-decoded, Windows drive letters understood); None otherwise."""
    from urllib.request import url2pathname  # here: that module brings http, email and ssl, 30 ms of every start

    parsed = urlparse(uri)
    if parsed.scheme.lower() != "file":
        return None
    if parsed.netloc and parsed.netloc != "localhost":
        return Path(url2pathname(f"//{parsed.netloc}{parsed.path}"))  # a network share
    return Path(url2pathname(parsed.path) if os.name == "nt" else unquote(parsed.path))


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def _ends_walk(folder: Path, home: Path | None) -> bool:
    return folder.parent == folder or folder == home


def _never_a_project(folder: Path) -> str:
    what = "the file-system root" if folder.parent == folder else "your home folder"
    return f"{what}, which is never taken as a project"
