"""Three-way merge of memory files for git, and the command that sets a repository up to use it.

git runs `mcp-memory-contexts merge-driver %O %A %B %P` with the common ancestor, our version and theirs (three
temporary files) and the file's path in the work tree (for messages), and takes the result from the second
file. The files are merged record by record, never line by line:

- an entity is known by its name, a relation by (from, to, relationType), any other line by its text (without
  the CR of a CRLF line end, so a side saved with the other line ending has the same lines);
- what one side added is kept (both sides' additions when both added), what one side deleted is gone;
- a record changed on both sides is merged field by field, and an entity's observations one by one: added on
  either side, kept; deleted on either side, gone;
- an entity deleted on one side that the other side gave new observations, or a new relation, comes back with
  only what was added;
- a real conflict, a field set to two different values (an entityType, an unknown field), keeps the value of the
  side whose file sorts first and writes the other side's whole line right after: the server loads the first and
  reports the second as a differing second version until someone deletes it, so nothing is lost; the driver then
  exits 1 and git asks for a look;
- lines that are not records are kept as they are (unless one side deleted them); blank lines are dropped;
- the result is in the official format, one line per record: the records in the order of the side whose file
  sorts first, then what only the other side has, with the line ending of our version (CRLF when most of its lines
  end so; lines that are not records keep theirs, as our file has them when it has them). Merging A into B or B
  into A gives the same bytes (when both end their lines alike).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_server.errors import MemoryServerError
from memory_server.files import write_atomically
from memory_server.graph import (
    Entity,
    KnowledgeGraph,
    Relation,
    UnusableLine,
    encode_entity,
    encode_relation,
    newline_of,
)

DRIVER = "mcp-memory-contexts"  # the name in `.gitattributes` (merge=…) and in git's config (merge.<name>.…)
MERGE_COMMAND = "merge-driver"
INSTALL_COMMAND = "install-merge-driver"
DEFAULT_PATTERNS = (".ai-memory.jsonl",)

Key = tuple[str, ...]  # ("entity", name), ("relation", from, to, type) or ("line", text)
Record = Entity | Relation | str
_MISSING: Any = object()


@dataclass
class MergeResult:
    data: bytes
    conflicts: list[str] = field(default_factory=list)


class MergeSetupError(MemoryServerError, RuntimeError):
    """The repository could not be set up for the merge driver; the text says why."""


def merge(base: bytes, ours: bytes, theirs: bytes) -> MergeResult:
    """Merge two versions of a memory file that both come from `base`."""
    first, second = sorted((ours, theirs))  # by content, so the direction of the merge changes nothing
    old, one, two = _records(base), _records(first), _records(second)
    conflicts: list[str] = []
    merged: dict[Key, list[Record]] = {}
    revivable: dict[str, Entity] = {}  # entities deleted on one side, still there on the other
    for key in dict.fromkeys([*one, *two, *old]):
        merged[key] = _merge_record(old.get(key), one.get(key), two.get(key), conflicts, revivable)
    _revive_ends_of_relations(merged, old, revivable)
    newline = newline_of(ours).decode()  # git takes the result from our file: it keeps that file's line ending
    mine = one if first is ours else two  # a line that is not a record keeps its bytes as our file has them
    lines = [
        mine.get(key, record) + "\n" if isinstance(record, str) else _text(record) + newline
        for key, records in merged.items()
        for record in records
    ]
    return MergeResult("".join(lines).encode("utf-8", "surrogateescape"), conflicts)


def merge_files(base: Path, ours: Path, theirs: Path) -> MergeResult:
    """git's merge-driver contract: merge the three files and leave the result in `ours`."""
    result = merge(base.read_bytes(), ours.read_bytes(), theirs.read_bytes())
    write_atomically(ours, result.data)
    return result


def install(folder: Path, patterns: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """Set up the git repository holding `folder` to merge files matching `patterns` with the driver: a line in
    the `.gitattributes` of its work tree (to commit, so the whole team's merges use it) and the driver in the
    repository's own config (`git config --local`: git never runs a command a repository brings with it, so each
    clone installs it once). Running it again changes nothing. Returns what it did, one line per step."""
    for pattern in patterns:
        if not pattern or pattern[0] in "#!" or any(c.isspace() for c in pattern):
            raise MergeSetupError(f"{pattern!r} is not a usable .gitattributes pattern; give e.g. '.ai-memory.jsonl'.")
    top = Path(_git(folder, "rev-parse", "--show-toplevel"))
    steps = [_add_attributes(top / ".gitattributes", patterns)]
    command = driver_command()
    _git(top, "config", "--local", f"merge.{DRIVER}.name", "memory-contexts: three-way merge of memory files")
    _git(top, "config", "--local", f"merge.{DRIVER}.driver", command)
    steps.append(f"git config --local merge.{DRIVER}.driver '{command}'")
    return steps


def driver_command() -> str:
    """The command git runs: ours by name when it is on PATH, else this very interpreter (a `uvx` run)."""
    program = DRIVER if shutil.which(DRIVER) else f"{shlex.quote(sys.executable)} -m memory_server"
    return f"{program} {MERGE_COMMAND} %O %A %B %P"


# ---- merging one record ----------------------------------------------------------------------------------------


def _merge_record(
    base: Record | None, one: Record | None, two: Record | None, conflicts: list[str], revivable: dict[str, Entity]
) -> list[Record]:
    if _same(one, two) or _same(two, base):
        chosen = one
    elif _same(one, base):
        chosen = two
    elif isinstance(one, Entity) and isinstance(two, Entity):
        return _merge_entities(base if isinstance(base, Entity) else None, one, two, conflicts)
    elif isinstance(one, Relation) and isinstance(two, Relation):
        return _merge_relations(base if isinstance(base, Relation) else None, one, two, conflicts)
    else:  # deleted on one side, changed on the other: only what the change added survives
        chosen = _additions(base, one if one is not None else two)
    if chosen is None and isinstance(base, Entity):
        survivor = one if one is not None else two
        if isinstance(survivor, Entity):
            revivable[survivor.name] = _additions(base, survivor) or Entity(
                survivor.name, survivor.entity_type, [], dict(survivor.extra)
            )
    return [chosen] if chosen is not None else []


def _additions(base: Record | None, kept: Record | None) -> Entity | None:
    """What a changed entity holds that `base` did not: its new observations, or None if there are none."""
    if not (isinstance(kept, Entity) and isinstance(base, Entity)):
        return None
    known = set(base.observations)
    added = [o for o in kept.observations if o not in known]
    return Entity(kept.name, kept.entity_type, added, dict(kept.extra)) if added else None


def _merge_entities(base: Entity | None, one: Entity, two: Entity, conflicts: list[str]) -> list[Record]:
    clashes: list[str] = []
    entity_type = _merge_value(
        "entityType", base.entity_type if base else _MISSING, one.entity_type, two.entity_type, clashes
    )
    extra = _merge_fields(base.extra if base else {}, one.extra, two.extra, clashes)
    before = base.observations if base else []
    dropped = set(before) - (set(one.observations) & set(two.observations))
    observations = [o for o in dict.fromkeys([*before, *one.observations, *two.observations]) if o not in dropped]
    merged = Entity(one.name, entity_type, observations, extra)
    if not clashes:
        return [merged]
    conflicts.append(f"entity {one.name!r}: {'; '.join(clashes)}. {_KEPT}")
    return [merged, two]


def _merge_relations(base: Relation | None, one: Relation, two: Relation, conflicts: list[str]) -> list[Record]:
    clashes: list[str] = []
    extra = _merge_fields(base.extra if base else {}, one.extra, two.extra, clashes)
    merged = Relation(one.source, one.target, one.relation_type, extra)
    if not clashes:
        return [merged]
    conflicts.append(f"relation {one.source!r} -{one.relation_type}-> {one.target!r}: {'; '.join(clashes)}. {_KEPT}")
    return [merged, two]


_KEPT = "Kept the first value; the other version is the line right after it, reported by the server until deleted"


def _merge_fields(base: dict[str, Any], one: dict[str, Any], two: dict[str, Any], clashes: list[str]) -> dict[str, Any]:
    merged = {}
    for name in dict.fromkeys([*one, *two, *base]):
        value = _merge_value(
            f"field {name!r}", base.get(name, _MISSING), one.get(name, _MISSING), two.get(name, _MISSING), clashes
        )
        if value is not _MISSING:
            merged[name] = value
    return merged


def _merge_value(label: str, base: Any, one: Any, two: Any, clashes: list[str]) -> Any:
    if one == two or two == base:
        return one
    if one == base:
        return two
    clashes.append(f"{label} is {_shown(one)} on one side and {_shown(two)} on the other")
    return one


def _revive_ends_of_relations(
    merged: dict[Key, list[Record]], base: dict[Key, Record], revivable: dict[str, Entity]
) -> None:
    """An entity deleted on one side comes back, with only what was added to it, when the other side added a
    relation to or from it: that side still knew the entity, and a relation must not point at nothing."""
    for key, records in list(merged.items()):
        if key in base:
            continue
        for record in records:
            if isinstance(record, Relation):
                for end in (record.source, record.target):
                    if not merged.get(("entity", end)) and end in revivable:
                        merged[("entity", end)] = [revivable[end]]


# ---- reading and writing -------------------------------------------------------------------------------------


def _records(data: bytes) -> dict[Key, Record]:
    """The records of one version, in file order, parsed by the store's own codec."""
    records: dict[Key, Record] = {}
    for record in KnowledgeGraph.parse(data).records:
        if isinstance(record, Entity):
            records.setdefault(("entity", record.name), record)
        elif isinstance(record, Relation):
            records.setdefault(("relation", *record.key), record)
        elif isinstance(record, UnusableLine) and record.text.strip():
            records.setdefault(("line", record.text.removesuffix("\r")), record.text)
    return records


def _same(a: Record | None, b: Record | None) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.removesuffix("\r") == b.removesuffix("\r")  # one line, whatever its line ending
    if isinstance(a, Entity) and isinstance(b, Entity):
        return (a.entity_type, a.observations, a.extra) == (b.entity_type, b.observations, b.extra)
    if isinstance(a, Relation) and isinstance(b, Relation):
        return a.extra == b.extra
    return a == b


def _text(record: Record) -> str:
    if isinstance(record, Entity):
        return encode_entity(record)
    if isinstance(record, Relation):
        return encode_relation(record)
    return record


def _shown(value: Any) -> str:
    return "(absent)" if value is _MISSING else repr(value)


def _add_attributes(attributes: Path, patterns: Sequence[str]) -> str:
    try:
        text = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    except (OSError, UnicodeDecodeError) as problem:
        raise MergeSetupError(f"Cannot read {attributes}: {problem}") from problem
    present = {tuple(line.split()) for line in text.splitlines()}
    missing = [f"{p} merge={DRIVER}" for p in patterns if (p, f"merge={DRIVER}") not in present]
    if not missing:
        return f"{attributes}: already has {', '.join(f'{p} merge={DRIVER}' for p in patterns)}"
    separator = "\n" if text and not text.endswith("\n") else ""
    try:
        write_atomically(attributes, (text + separator + "".join(f"{line}\n" for line in missing)).encode("utf-8"))
    except OSError as problem:
        raise MergeSetupError(f"Cannot write {attributes}: {problem}") from problem
    return f"{attributes}: added {', '.join(missing)} (commit it, so every clone merges memory files this way)"


def _git(folder: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise MergeSetupError("git is not installed (or not on PATH); install git first.") from None
    if done.returncode != 0:
        raise MergeSetupError(f"git {' '.join(args)} failed in {folder}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()
