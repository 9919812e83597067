"""Path templates: the variables a context's path may hold, how they are filled in for a project, and where the
filled path may lead.

`{projectDir}` (or `<projectDir>`), `{projectName}`, `{projectId}` and `{repoRoot}` may stand anywhere in a path.
A template that starts with `{projectDir}` or `{repoRoot}` keeps its file inside that folder; any other template
must lead into one of the user's own memory folders (the contexts folder, the data folder, `~/.ai-memory`). Both
rules are checked on the real path, so neither `..` nor a symbolic link leads anywhere else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memory_server.errors import MemoryServerError
from memory_server.project import Project

TEMPLATE_VARIABLES = ("{projectDir}", "<projectDir>", "{projectName}", "{projectId}", "{repoRoot}")
_ANCHORS = {"{projectDir}": "the project folder", "<projectDir>": "the project folder", "{repoRoot}": "the repository"}
_VARIABLE = re.compile("|".join(re.escape(v) for v in TEMPLATE_VARIABLES))
_SAMPLE = {"{projectDir}": "/project", "<projectDir>": "/project", "{projectName}": "project",
           "{projectId}": "project-0", "{repoRoot}": "/project"}  # fmt: skip


# $NAME, ${NAME}, %NAME%, {NAME} (also in doubled braces) and <NAME>: the ways people write a variable.
_LOOKS_LIKE_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)|%(\w+)%|\{+(\w+)\}+|<(\w+)>")
_MEANT = {
    **dict.fromkeys(["projectdir", "project", "projectroot", "projectfolder", "projectpath", "workspacefolder",
                     "workspace", "workspaceroot", "workspacedir", "root", "cwd", "pwd", "dir"], "{projectDir}"),
    **dict.fromkeys(["projectname", "name", "workspacefoldername"], "{projectName}"),
    **dict.fromkeys(["projectid", "id"], "{projectId}"),
    **dict.fromkeys(["reporoot", "repo", "repository", "gitroot", "reporootdir"], "{repoRoot}"),
    **dict.fromkeys(["home", "userprofile"], "~"),
}  # fmt: skip


class PathTemplateError(MemoryServerError, ValueError):
    """A path template that is malformed or leads where a project's memory may not be."""


@dataclass(frozen=True)
class FilledPath:
    path: Path
    in_project: bool  # inside the project or its repository: the file travels with the code, and its authors


def is_template(path: str) -> bool:
    return _VARIABLE.search(path) is not None


def not_a_variable(path: str) -> str | None:
    """What a path holds that is written as a variable but is none of ours (`${projectDir}`, `{project}`, `$HOME`,
    `%USERPROFILE%`, `<projectName>`), with the variable it may mean, or None. Such a path is no template: it named
    a folder called `$` or `{project}` in the contexts folder, and the memory was never where the user meant it."""
    for match in _LOOKS_LIKE_VARIABLE.finditer(path):
        if match.group() not in TEMPLATE_VARIABLES:
            word = next(group for group in match.groups() if group)
            meant = _MEANT.get(word.casefold().replace("_", ""))
            return f"{match.group()!r} is no variable" + ("" if meant is None else f" (did you mean {meant!r}?)")
    return None


VARIABLES_HELP = (
    "A path may hold {projectDir}, {projectName}, {projectId} and {repoRoot}, written without '$', and ~ for your "
    "home folder; environment variables are not filled in."
)


def fill(template: str, project: Project, memory_folders: Sequence[Path], relative_to: Path) -> FilledPath:
    """The file `template` names for `project`. A relative result is taken from `relative_to` (the contexts
    folder, as for fixed paths). Raises PathTemplateError when the file would lie where it may not."""
    values: dict[str, Callable[[], str]] = {
        "{projectDir}": lambda: str(project.root),
        "<projectDir>": lambda: str(project.root),
        "{projectName}": lambda: project.name,
        "{projectId}": lambda: project.id,
        "{repoRoot}": lambda: str(project.repo_root),
    }
    path = _filled(template, lambda variable: values[variable](), relative_to)
    anchor = next((a for a in _ANCHORS if template.startswith(a)), None)
    if anchor is None:
        _confine_to_memory_folders(template, path, memory_folders)
        return FilledPath(path, in_project=False)
    base = project.repo_root if anchor == "{repoRoot}" else project.root
    _confine(template, path, base, _ANCHORS[anchor], anchor)
    return FilledPath(path, in_project=True)


def check_template(template: str, memory_folders: Sequence[Path], relative_to: Path) -> None:
    """What can be checked without a project: the template, filled with sample values, stays where it must."""
    path = _filled(template, _SAMPLE.__getitem__, relative_to)
    anchor = next((a for a in _ANCHORS if template.startswith(a)), None)
    if anchor is None:
        _confine_to_memory_folders(template, path, memory_folders)
    elif not path.is_relative_to(_SAMPLE[anchor]):
        raise _leaves(template, None, _ANCHORS[anchor], anchor)


def _filled(template: str, value_of: Callable[[str], str], relative_to: Path) -> Path:
    # One pass, so a folder whose name looks like a variable is never filled in again.
    path = Path(_VARIABLE.sub(lambda match: value_of(match.group()), template)).expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else relative_to / path))


def _confine(template: str, path: Path, base: Path, what: str, anchor: str) -> None:
    if not path.is_relative_to(base):
        raise _leaves(template, path, f"{what} {base}", anchor)
    real = _real(path)
    if not real.is_relative_to(base.resolve()):
        # The path itself is inside: a symbolic link on the way (planted after the context was added, perhaps)
        # leads out. Name where it leads, since the path alone reads as inside.
        raise PathTemplateError(
            f"The path template {template!r} resolves to {path}, which a symbolic link takes to {real}, outside "
            f"{what} {base}. Nothing was read or written. Remove the link (or point it at a file inside {base}): "
            f"a template starting with {anchor} must keep its file inside it."
        )


def _confine_to_memory_folders(template: str, path: Path, folders: Sequence[Path]) -> None:
    folders = [Path(os.path.normpath(folder.expanduser())) for folder in folders]
    listed = ", ".join(str(f) for f in folders)
    folder = next((f for f in folders if path.is_relative_to(f)), None)
    if folder is not None:
        # A link inside a memory folder (made by the user: a template cannot make one) may lead into another
        # memory folder; anywhere else is refused, at every write too (contexts.py gives that folder as the root).
        if memory_folder_of(path, folders) is None:
            raise PathTemplateError(
                f"The path template {template!r} resolves to {path}, which a symbolic link takes to {_real(path)}, "
                f"outside your memory folders ({listed}). Keep the file inside them (a whole memory folder may be "
                "a link), or give this context a fixed path."
            )
        return
    raise PathTemplateError(
        f"The path template {template!r} resolves to {path}, which is neither inside the project nor in one of "
        f"your memory folders ({listed}). Start it with {{projectDir}} or {{repoRoot}} to keep the file in the "
        "project, or put it under one of those folders, e.g. '~/.ai-memory/projects/{projectId}.jsonl'."
    )


def memory_folder_of(path: Path, folders: Sequence[Path]) -> Path | None:
    """The memory folder in which `path` really lies, links followed; None when it lies in none."""
    real = _real(path)
    return next((f for f in folders if real.is_relative_to(f.expanduser().resolve())), None)


def _leaves(template: str, path: Path | None, where: str, anchor: str) -> PathTemplateError:
    resolves = f" resolves to {path}, which" if path is not None else ""
    keep = f"A template starting with {anchor} must keep its file inside it." if anchor else "Keep the file inside it."
    return PathTemplateError(
        f"The path template {template!r}{resolves} leaves {where} (through '..' or a symbolic link). {keep}"
    )


def _real(path: Path) -> Path:
    real = path.parent.resolve() / path.name
    return real.resolve() if real.is_symlink() else real
