"""Memory contexts: which context a call uses, and where its file is now.

A context is a name for one memory file: a fixed path (`~/.ai-memory/work.jsonl`) or a template resolved against
the project being worked on (`{projectDir}/.ai-memory.jsonl`). The registry file (registry.py) is shared by every
server process; the active context belongs to one process.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memory_server.errors import MemoryFileError, ReadOnlyError, echo
from memory_server.graph import KnowledgeGraph
from memory_server.project import Project, ProjectNotFoundError, find_project
from memory_server.registry import (
    DEFAULT_CONTEXT,
    PROJECT_PLACEHOLDERS,
    REGISTRY_FILE,
    ContextConfig,
    ContextConfigError,
    ContextRegistry,
    DetectionRules,
    UnknownContextError,
    _first_error,
)
from memory_server.store import GraphStore

__all__ = [  # the registry's names are re-exported: callers import contexts from here
    "DEFAULT_CONTEXT",
    "REGISTRY_FILE",
    "ActiveContextGoneError",
    "ContextConfig",
    "ContextConfigError",
    "ContextRegistry",
    "Contexts",
    "DetectionRules",
    "ResolvedContext",
    "Start",
    "UnknownContextError",
    "new_context",
    "project_path",
]


class ActiveContextGoneError(UnknownContextError):
    """The session's active context is no longer in the registry, which read well: it was really removed."""

    def __init__(self, name: str, known: list[str], registry: Path) -> None:
        super().__init__(name, known)
        self.registry = registry

    def __str__(self) -> str:
        return (
            f"The active context {echo(self.name)} is no longer in {self.registry} (another process or a person "
            "removed it), so nothing was read or written. Call set_active_context with one of: "
            f"{', '.join(self.known)}; or add {echo(self.name)} back."
        )


@dataclass(frozen=True)
class Start:
    """Where project detection starts, and why there."""

    folder: Path
    origin: str


@dataclass(frozen=True)
class ResolvedContext:
    name: str
    path: Path
    config: ContextConfig
    read_only: bool
    project: Project | None = None

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"name": self.name, "path": str(self.path)}
        if self.project is not None:
            summary["projectDir"] = str(self.project.root)
        summary["readOnly"] = self.read_only
        return summary

    def require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"Context '{self.name}' ({self.path})")


class Contexts:
    """The contexts of one server process: the registry, the active context, and one store per memory file."""

    def __init__(
        self,
        registry: ContextRegistry,
        *,
        memory_path: Path | None = None,
        default_context: str | None = None,
        project_dir: Path | None = None,
        read_only: bool = False,
        lock_timeout: float = 10.0,
    ) -> None:
        self.registry = registry
        self.memory_path = memory_path  # --memory-path: the default context's file, whatever the registry says
        self.project_dir = project_dir
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.roots: list[Path] = []  # the client's workspace folders, set by the server
        self._stores: dict[Path, GraphStore] = {}
        self._stores_mutex = threading.Lock()
        self._active = self._initial_active(default_context)

    @property
    def active_name(self) -> str:
        """The context calls use when they name none. It changes only when the session says so: a registry that
        cannot be read for a moment keeps its last good reading, and a context really removed is reported by
        `active_config`, never replaced by another behind the session's back."""
        try:
            return self.registry.get(self._active).name
        except UnknownContextError:
            return self._active

    def active_config(self) -> ContextConfig:
        try:
            return self.registry.get(self._active)
        except UnknownContextError as gone:
            raise ActiveContextGoneError(self._active, gone.known, self.registry.file) from None

    def problems(self) -> list[str]:
        """What every result should warn about: the registry's problems, and an active context that is gone."""
        try:
            self.active_config()
        except ActiveContextGoneError as gone:
            return [*self.registry.problems(), str(gone)]
        return self.registry.problems()

    def set_active(self, name: str) -> ContextConfig:
        config = self.registry.get(name)
        self._active = config.name
        return config

    def forget(self, name: str) -> ContextConfig:
        removed = self.registry.remove(name)
        if self._active.lower() == removed.name.lower():
            self._active = DEFAULT_CONTEXT
        return removed

    def resolve(self, name: str | None = None, project_dir: str | None = None) -> ResolvedContext:
        """The context a call uses (`name`, else the active one) with its file path worked out now."""
        return self.resolve_config(self.registry.get(name) if name else self.active_config(), project_dir)

    def resolve_config(self, config: ContextConfig, project_dir: str | None = None) -> ResolvedContext:
        read_only = self.read_only or config.read_only
        if self.memory_path is not None and config.name.lower() == DEFAULT_CONTEXT:
            return ResolvedContext(config.name, self.memory_path, config, read_only)
        if not config.project_based:
            return ResolvedContext(config.name, self.static_path(config.path), config, read_only)
        start = self.start(project_dir)
        rules = config.rules
        project = find_project(start.folder, rules.markers, rules.max_depth, context=config.name, origin=start.origin)
        return ResolvedContext(config.name, project_path(config.path, project), config, read_only, project)

    def start(self, project_dir: str | None = None) -> Start:
        """Where project detection starts: the call's projectDir, MEMORY_PROJECT_DIR, the client's first
        workspace root, else the server's current folder."""
        if project_dir:
            return Start(Path(project_dir), "the projectDir argument")
        if self.project_dir is not None:
            return Start(self.project_dir, "MEMORY_PROJECT_DIR")
        if self.roots:
            return Start(self.roots[0], "the client's workspace root")
        return Start(Path.cwd(), "the server's current folder")

    def store(self, context: ResolvedContext) -> GraphStore:
        key = Path(os.path.abspath(context.path))
        with self._stores_mutex:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = GraphStore(key, self.lock_timeout)
            return store

    def open_stores(self) -> list[GraphStore]:
        with self._stores_mutex:
            return list(self._stores.values())

    def static_path(self, template: str) -> Path:
        path = Path(template).expanduser()
        return path if path.is_absolute() else self.registry.directory / path

    def _initial_active(self, requested: str | None) -> str:
        for candidate in (requested, self.registry.persisted_active()):
            if candidate:
                try:
                    return self.registry.get(candidate).name
                except UnknownContextError:
                    continue
        return DEFAULT_CONTEXT


def project_path(template: str, project: Project) -> Path:
    """Fill a `{projectDir}` template for `project`; the result must stay inside the project folder."""
    filled = template
    for placeholder in PROJECT_PLACEHOLDERS:
        filled = filled.replace(placeholder, str(project.root))
    filled = filled.replace("{projectName}", project.root.name)
    path = Path(os.path.normpath(Path(filled).expanduser()))
    real_root = project.root.resolve()
    real_path = path.parent.resolve() / path.name
    if real_path.is_symlink():
        real_path = real_path.resolve()
    if not real_path.is_relative_to(real_root):
        raise ContextConfigError(
            f"The path template {template!r} resolves to {path}, which leaves the project folder {project.root} "
            "(through '..' or a symbolic link). A project context must keep its file inside the project."
        )
    return path


def new_context(
    contexts: Contexts,
    name: str,
    path: str,
    description: str = "",
    markers: list[str] | None = None,
    max_depth: int | None = None,
    read_only: bool = False,
    project_dir: str | None = None,
) -> ContextConfig:
    """Check a context proposed by the model (untrusted input) and build its registry entry."""
    rules = {k: v for k, v in {"markers": markers, "maxDepth": max_depth}.items() if v is not None}
    try:
        config = ContextConfig(
            name=name,
            path=path.strip(),
            description=description,
            read_only=read_only,
            project_detection_rules=DetectionRules.model_validate(rules) if rules else None,
        )
    except ValidationError as problem:
        raise ContextConfigError(
            f"Cannot add context {echo(name)}: {_first_error(problem)}. Names use letters, digits, '_' and '-' "
            "(at most 64); markers are plain file or folder names."
        ) from None
    if not config.path.endswith(".jsonl"):
        raise ContextConfigError(f"The path {echo(config.path)} must end in '.jsonl': memory files are JSONL files.")
    if config.project_based:
        _check_template(config.path)
        try:
            resolved: Path | None = contexts.resolve_config(config, project_dir).path
        except ProjectNotFoundError:
            resolved = None  # nothing to inspect yet; the template is checked again whenever it resolves
    else:
        resolved = contexts.static_path(config.path)
    if resolved is not None:
        _check_memory_file(resolved)
    return config


def _check_template(template: str) -> None:
    placeholder = next((p for p in PROJECT_PLACEHOLDERS if template.startswith(p)), None)
    if placeholder is None:
        raise ContextConfigError(
            f"The path template {template!r} must start with {{projectDir}}, e.g. '{{projectDir}}/.ai-memory.jsonl'."
        )
    rest = template[len(placeholder) :].replace("{projectName}", "name")
    if any(p in rest for p in PROJECT_PLACEHOLDERS):
        raise ContextConfigError(f"The path template {template!r} may use {{projectDir}} only once, at its start.")
    inside = os.path.normpath("/project/" + rest.lstrip("/"))
    if not inside.startswith("/project/"):
        raise ContextConfigError(
            f"The path template {template!r} leaves the project folder; keep the file inside it (no '..')."
        )


def _check_memory_file(path: Path) -> None:
    if path.is_dir():
        raise ContextConfigError(f"{path} is a folder; give the path of a .jsonl memory file.")
    if not path.exists():
        return
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as problem:
        raise MemoryFileError(path, "read", problem) from problem
    skipped = KnowledgeGraph.parse(text).skipped_lines()
    if skipped:
        raise ContextConfigError(
            f"{path} exists but does not look like a memory file (line {skipped[0].line_number}: "
            f"{skipped[0].reason}); refusing to use it. Choose a new file or an existing memory file."
        )
