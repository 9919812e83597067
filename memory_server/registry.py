"""The `contexts.json` registry: its entries, read whenever the file changes and edited under a lock.

The file is shared by every server process and edited by people; what cannot be used in it is reported with its line
and skipped, never rewritten. Which context a session uses, and where its file is now, is contexts.py's business.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from memory_server.errors import MemoryFileError, MemoryServerError, echo, listed
from memory_server.files import (
    Stamp,
    lock_path_for,
    locked,
    remove_stale_temp_files,
    stamp_of,
    temp_prefix,
    write_atomically,
)
from memory_server.project import DEFAULT_MARKERS, DEFAULT_MAX_DEPTH
from memory_server.templates import is_template, not_a_variable

DEFAULT_CONTEXT = "default"
REGISTRY_FILE = "contexts.json"
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_FIX_ADVICE = "Fix the file by hand; the server never overwrites it."
_CREATE_ADVICE = "add_context and persist=true need that folder to be writable, with free space."
_PROBLEMS_LISTED = 3  # of the registry's problems, in an error or a result's warnings
_CREATE_RETRY = 5.0  # seconds between attempts to create a registry that could not be created


class UnknownContextError(MemoryServerError, LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        if self.name == "*":  # what search_nodes takes; a model tries it elsewhere too
            return (
                "'*' (every context) works with search_nodes (and the search command) only. Name one context "
                f"({listed(self.known)}), or leave context out for the active one."
            )
        return f"Unknown context {echo(self.name)}. Known contexts: {listed(self.known)}. Use one of these names."


class ContextConfigError(MemoryServerError, ValueError):
    """A context definition or a registry change that cannot be accepted; the text says why and how to fix it."""


class DetectionRules(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    markers: list[str] = Field(default_factory=lambda: list(DEFAULT_MARKERS), min_length=1)
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=0, le=64)

    @field_validator("markers")
    @classmethod
    def _plain_names(cls, markers: list[str]) -> list[str]:
        for marker in markers:
            if not marker or "/" in marker or "\\" in marker or marker in (".", ".."):
                raise ValueError(f"marker {echo(marker)} must be a plain file or folder name such as '.git'")
            _refuse_control_characters(marker, "marker")
        return markers


class ContextConfig(BaseModel):
    """One entry of `contexts.json`. Unknown keys are kept so a rewrite of the file does not drop them."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str = Field(pattern=NAME_PATTERN)
    path: str = Field(min_length=1)
    description: str = ""
    is_project_based: bool | None = None
    read_only: bool = False
    project_detection_rules: DetectionRules | None = None

    @field_validator("path")
    @classmethod
    def _printable_path(cls, path: str) -> str:
        _refuse_control_characters(path, "path")
        return path

    @property
    def project_based(self) -> bool:
        if self.is_project_based is not None:
            return self.is_project_based
        return is_template(self.path)

    @property
    def rules(self) -> DetectionRules:
        return self.project_detection_rules or DetectionRules()


class ContextRegistry:
    """The contexts of `contexts.json`, re-read whenever the file changes, with locked atomic edits.

    A file that cannot be used for a moment (an editor saving it, a half-written copy) does not take the contexts
    away: the last good reading stays in use, with a warning, until the file reads well again.
    """

    def __init__(self, directory: Path, default_path: Path, lock_timeout: float = 10.0) -> None:
        self.directory = Path(os.path.abspath(directory.expanduser()))
        self.file = self.directory / REGISTRY_FILE
        self.default_path = default_path
        self.lock_timeout = lock_timeout
        self._mutex = threading.RLock()
        self._stamp: Stamp | None = None  # the state of the file last read, None: read it again
        self._read_once = False  # a good reading exists, so a bad moment keeps it rather than losing the contexts
        self._create_failed: tuple[float, str] | None = None  # when and why the file could not be created
        self._swept = False
        self._contexts: dict[str, ContextConfig] = {}
        self._active: str | None = None
        self._problems: list[str] = []
        self._ensure_default()

    # ---- reading -------------------------------------------------------------------------------------------

    def contexts(self) -> list[ContextConfig]:
        with self._mutex:
            self._refresh()
            return sorted(self._contexts.values(), key=lambda c: c.name.lower())

    def get(self, name: str) -> ContextConfig:
        with self._mutex:
            self._refresh()
            found = self._contexts.get(name.lower())
            if found is None:
                raise UnknownContextError(name, [c.name for c in self.contexts()])
            return found

    def persisted_active(self) -> str | None:
        with self._mutex:
            self._refresh()
            return self._active

    def problems(self, brief: bool = False) -> list[str]:
        """What is wrong with the file, one problem a line; `brief`: the first few and how many more (for a
        result or an error, which must stay short however broken the file is)."""
        with self._mutex:
            self._refresh()
            problems = list(self._problems)
        if not brief or len(problems) <= _PROBLEMS_LISTED:
            return problems
        more = len(problems) - _PROBLEMS_LISTED
        return [
            *problems[:_PROBLEMS_LISTED],
            f"And {more:,} more problems in {self.file}: `mcp-memory-contexts contexts` lists them all.",
        ]

    # ---- editing -------------------------------------------------------------------------------------------

    def add(self, config: ContextConfig) -> None:
        def change(data: dict[str, Any]) -> None:
            if config.name.lower() in self._contexts:
                raise ContextConfigError(
                    f"A context named '{self._contexts[config.name.lower()].name}' already exists "
                    "(names are compared ignoring case). Pick another name or remove that context first."
                )
            data.setdefault("contexts", []).append(config.model_dump(by_alias=True, exclude_none=True))

        self._edit(change)

    def remove(self, name: str) -> ContextConfig:
        removed = self.get(name)
        if removed.name.lower() == DEFAULT_CONTEXT:
            raise ContextConfigError("The 'default' context always exists and cannot be removed.")

        def change(data: dict[str, Any]) -> None:
            data["contexts"] = [
                c for c in data.get("contexts", []) if str(c.get("name", "")).lower() != removed.name.lower()
            ]
            if str(data.get("activeContext", "")).lower() == removed.name.lower():
                data["activeContext"] = DEFAULT_CONTEXT

        self._edit(change)
        return removed

    def persist_active(self, name: str) -> None:
        self._edit(lambda data: data.__setitem__("activeContext", name))

    # ---- internals -----------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        try:
            stamp = stamp_of(self.file)
        except MemoryFileError as problem:  # e.g. a file where the folder should be
            stamp, unreachable = None, _why(problem)
        else:
            unreachable = None
        if stamp is not None and stamp == self._stamp:
            return
        if stamp is None and not self._read_once:
            stamp = self._create()
        if stamp is None:
            if self._create_failed is not None:
                self._cannot_use(self._create_failed[1], _CREATE_ADVICE)
            else:
                self._cannot_use(unreachable or "it does not exist; an editor may be saving it", _FIX_ADVICE)
            return
        try:
            text = self.file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as problem:
            self._cannot_use(_why(problem), _FIX_ADVICE)
            return
        reading = _read_registry(text)
        if reading.unusable is not None:
            self._cannot_use(reading.unusable, _FIX_ADVICE)
            if not self._read_once:
                self._stamp = stamp  # nothing better to fall back on: this reading stands until the file changes
            return
        self._contexts, self._active = reading.contexts, reading.active
        self._problems = [f"{self.file}: {detail}. {_FIX_ADVICE}" for detail in reading.problems]
        self._ensure_default()
        self._stamp, self._read_once = stamp, True
        self._sweep_once()

    def _cannot_use(self, reason: str, advice: str) -> None:
        """The file cannot be read or used now: keep the last good reading, or else only the default context."""
        if self._read_once:
            self._problems = [
                (
                    f"{self.file} cannot be used right now ({reason}); the contexts last read from it are still used "
                    f"until it reads well again. {advice}"
                )
            ]
            return
        self._contexts, self._active = {}, None
        self._ensure_default()
        self._problems = [
            f"{self.file} cannot be used ({reason}); only the built-in 'default' context is available. {advice}"
        ]

    def _ensure_default(self) -> None:
        if DEFAULT_CONTEXT not in self._contexts:
            self._contexts[DEFAULT_CONTEXT] = ContextConfig(
                name=DEFAULT_CONTEXT, path=str(self.default_path), description="Default memory"
            )

    def _create(self) -> Stamp | None:
        """Write the first registry; None when that cannot be done now (tried again after a pause)."""
        if self._create_failed is not None and time.monotonic() - self._create_failed[0] < _CREATE_RETRY:
            return None
        data = {
            "activeContext": DEFAULT_CONTEXT,
            "contexts": [{"name": DEFAULT_CONTEXT, "path": str(self.default_path), "description": "Default memory"}],
        }
        try:
            with locked(self._lock_in_directory(), self.lock_timeout):
                remove_stale_temp_files(self.file)
                if not self.file.exists():
                    write_atomically(self.file, _dump_registry(data))
                stamp = stamp_of(self.file)
        except (MemoryServerError, OSError) as problem:  # not fatal: the built-in default context still works
            self._create_failed = (time.monotonic(), f"it could not be created: {_why(problem)}")
            return None
        self._create_failed = None
        return stamp

    def _sweep_once(self) -> None:
        """Delete the temporary files of writers killed mid-write, once per process. Only while holding the lock:
        every writer holds it for as long as its temporary file exists, so no live writer's file is touched."""
        if self._swept:
            return
        self._swept = True
        if not any(self.directory.glob(glob.escape(temp_prefix(self.file)) + "*.tmp")):
            return
        with contextlib.suppress(MemoryServerError), locked(self._lock_in_directory(), 0):  # busy: next start sweeps
            remove_stale_temp_files(self.file)

    def _edit(self, change: Any) -> None:
        with self._mutex, locked(self._lock_in_directory(), self.lock_timeout):
            remove_stale_temp_files(self.file)
            self._stamp = None
            self._refresh()
            if self._problems:
                raise ContextConfigError(
                    f"{self.file} has problems, so it is not changed until they are fixed by hand: "
                    + " ".join(self.problems(brief=True))
                )
            try:
                data = json.loads(self.file.read_text(encoding="utf-8"))
            except FileNotFoundError:
                data = {"contexts": []}
            except OSError as problem:
                raise MemoryFileError(self.file, "read", problem) from problem
            change(data)
            try:
                write_atomically(self.file, _dump_registry(data))
            except OSError as problem:
                raise MemoryFileError(self.file, "write", problem) from problem
            self._stamp = None
            self._refresh()

    def _lock_in_directory(self) -> filelock.BaseFileLock:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as problem:
            raise MemoryFileError(self.file, "create the folder of", problem) from problem
        return filelock.FileLock(lock_path_for(self.file), thread_local=False)  # placed anew: see lock_path_for


@dataclass
class _Reading:
    """What a registry file holds: its usable contexts, and what was wrong (details without the file's name)."""

    contexts: dict[str, ContextConfig] = field(default_factory=dict)
    active: str | None = None
    problems: list[str] = field(default_factory=list)
    unusable: str | None = None  # why the file as a whole cannot be used


def _read_registry(text: str) -> _Reading:
    """Parse `contexts.json`: a bad entry is skipped with a problem naming its line; the other entries are kept."""
    reading = _Reading()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as problem:
        reading.unusable = f"line {problem.lineno}, column {problem.colno}: {problem.msg}"
        return reading
    if not isinstance(data, dict):
        reading.unusable = "line 1: the file must hold a JSON object with a 'contexts' list"
        return reading
    entries = data.get("contexts", [])
    if not isinstance(entries, list):
        reading.problems.append(f"line {_line_of(text, 'contexts')}: 'contexts' must be a list; no context was loaded")
        entries = []
    for index, entry in enumerate(entries):
        _read_entry(reading, text, index, entry)
    active = data.get("activeContext")
    if active is not None and (not isinstance(active, str) or active.lower() not in reading.contexts):
        if not (isinstance(active, str) and active.lower() == DEFAULT_CONTEXT):
            reading.problems.append(
                f"line {_line_of(text, 'activeContext')}: activeContext {echo(active)} names no valid context; "
                "'default' is used instead"
            )
            active = None
    reading.active = active
    return reading


def _read_entry(reading: _Reading, text: str, index: int, entry: Any) -> None:
    label = entry.get("name") if isinstance(entry, dict) else None
    line = _line_of(text, label, key="name") if isinstance(label, str) else _line_of(text, "contexts")
    where = f"line {line}, context #{index + 1}"
    try:
        config = ContextConfig.model_validate(entry)
    except ValidationError as problem:
        reading.problems.append(f"{where}: {_first_error(problem)}; this context is ignored")
        return
    if config.name.lower() in reading.contexts:
        reading.problems.append(
            f"{where}: the name '{config.name}' is used twice (ignoring case); the second is ignored"
        )
        return
    wrong = not_a_variable(config.path)
    if wrong:  # kept, since its file may hold memories already; the warning says how to mend the path
        reading.problems.append(f"{where}: in the path {echo(config.path)}, {wrong}; it is used as written")
    reading.contexts[config.name.lower()] = config


def _why(problem: BaseException) -> str:
    """An OS error as a person reads it: what failed and on which file, e.g. 'Permission denied: /etc/x'."""
    if isinstance(problem, MemoryFileError):
        problem = problem.cause
    if isinstance(problem, OSError) and problem.strerror:
        return f"{problem.strerror}: {problem.filename}" if problem.filename else problem.strerror
    return str(problem)


def _refuse_control_characters(text: str, what: str) -> None:
    """A NUL, newline or other control character in a path cannot name a file the user means (and a NUL makes every
    later file operation fail)."""
    for position, char in enumerate(text):
        if unicodedata.category(char) == "Cc":
            raise ValueError(
                f"the {what} holds the control character {char!r} at position {position}; "
                "give it as plain text, without NUL, newlines or other control characters"
            )


def _dump_registry(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _line_of(text: str, needle: str, key: str | None = None) -> int:
    """The line of the first `"key": "needle"` (or of `"needle"` anywhere, without a key) in the registry's text."""
    pattern = re.escape(json.dumps(needle))
    match = (key and re.search(re.escape(json.dumps(key)) + r"\s*:\s*" + pattern, text)) or re.search(pattern, text)
    return text.count("\n", 0, match.start()) + 1 if match else 1


def _first_error(problem: ValidationError) -> str:
    error = problem.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "entry"
    return f"'{where}' {error['msg'][0].lower()}{error['msg'][1:]}"
