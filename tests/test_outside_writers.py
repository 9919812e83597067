"""Other programs touching a memory file while real servers (spawned over stdio by the SDK's client) use it.

The outside programs are in `outside_writers.py`: a git-like saver that replaces the file by rename, a slow editor
that saves in place, a sync client that replaces the target of a symlinked memory path. The stress tests run eight
servers against one of them and count, on the final file:
- torn lines (lines that are not an entity or a relation);
- lines the outside program saved that are missing after the servers' next writes;
- writes a server acknowledged after the outside program's last save that are missing.
All three must be 0. Writes acknowledged *during* the outside program's saves can be lost to it: it writes back
what it read, whatever was added since (the README's "What is guaranteed"); their count is printed, not asserted.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from helpers import connect, entity, server_env, text_of
from mcp import ClientSession
from test_reliability import report

from memory_server.graph import KnowledgeGraph

pytestmark = pytest.mark.anyio

WRITERS = Path(__file__).parent / "outside_writers.py"


# ---- stress: eight servers and one outside program --------------------------------------------------------------


@dataclass
class Book:
    """What one server's acknowledged calls did, before and after the outside program's last save."""

    tag: str
    rng: random.Random
    during: dict[str, list[str]] = field(default_factory=dict)  # entity -> observations, acknowledged during saves
    after: dict[str, list[str]] = field(default_factory=dict)  # acknowledged after the last save ended
    refused: list[str] = field(default_factory=list)
    counter: int = 0

    def name(self) -> str:
        self.counter += 1
        return f"{self.tag}-{self.counter}"


async def one_write(s: ClientSession, book: Book, ledger: dict[str, list[str]], context: str) -> None:
    """Create an entity of our own (an append), or add an observation to one (a rewrite of the file)."""
    if ledger and book.rng.random() < 0.35:
        target = book.rng.choice(sorted(ledger))
        fact = f"fact {book.name()}"
        additions = [{"entityName": target, "contents": [fact]}]
        result = await s.call_tool("add_observations", {"observations": additions, "context": context})
        if not result.is_error:
            ledger[target].append(fact)
        elif "not found" in text_of(result):
            del ledger[target]  # created during a save, and that save wrote back what it had read before
        else:
            book.refused.append(text_of(result))
        return
    name = book.name()
    result = await s.call_tool(
        "create_entities", {"entities": [entity(name, "server", f"made by {name}")], "context": context}
    )
    if result.is_error:
        book.refused.append(text_of(result))
    else:
        ledger[name] = [f"made by {name}"]


@dataclass
class Phase:
    """One outside program against the servers: `go` starts the servers' writes, `saver` is set when it started."""

    kind: str
    context: str
    path: Path
    saves: int
    pause: tuple[float, float]
    books: list[Book]
    go: anyio.Event = field(default_factory=anyio.Event)
    saver: list[Saver] = field(default_factory=list)
    done: list[int] = field(default_factory=list)


async def server_life(env: dict[str, str], index: int, ready: list[int], phases: list[Phase]) -> None:
    async with connect(env) as s:
        ready.append(1)
        for phase in phases:
            book = phase.books[index]
            await phase.go.wait()
            while not phase.saver[0].finished.is_set():
                await one_write(s, book, book.during, phase.context)
                await anyio.sleep(book.rng.uniform(0.005, 0.03))
            for _ in range(10):  # the servers' next writes, after the outside program's last save
                await one_write(s, book, book.after, phase.context)
            phase.done.append(1)


class Saver:
    """An outside program in its own process; `lines` are the lines it saved, `finished` is set after its last save."""

    def __init__(self, kind: str, path: Path, saves: int, pause: tuple[float, float]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WRITERS), kind, str(path), "--saves", str(saves), "--pause", *map(str, pause)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.finished = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "done":
                break
            self.lines.append(line.rstrip("\n"))
        self.finished.set()

    def close(self) -> str:
        """Wait for the program to end; its stderr."""
        self.process.wait(30)
        self.reader.join(10)
        assert self.process.stdout is not None and self.process.stderr is not None
        errors = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return errors


@dataclass
class Counts:
    torn: int
    outside_lost: int
    acknowledged_lost: int
    lost_during_saves: int
    acknowledged: int


def count(memory: Path, books: list[Book], saver: Saver) -> Counts:
    data = memory.read_bytes()
    graph = KnowledgeGraph.parse(data)
    lines = set(data.decode("utf-8", "surrogateescape").splitlines())

    def missing(ledger: dict[str, list[str]]) -> int:
        lost = 0
        for name, observations in ledger.items():
            found = graph.entities.get(name)
            lost += len(observations) if found is None else len(set(observations) - set(found.observations))
        return lost

    return Counts(
        torn=len(graph.skipped_lines()),
        outside_lost=sum(line not in lines for line in saver.lines),
        acknowledged_lost=sum(missing(b.after) for b in books),
        lost_during_saves=sum(missing(b.during) for b in books),
        acknowledged=sum(len(o) for b in books for o in (*b.during.values(), *b.after.values())),
    )


SERVERS = 8
SEED = "".join(f'{{"type":"entity","name":"seed-{i}","entityType":"t","observations":[]}}\n' for i in range(20))


async def test_eight_servers_and_each_outside_program_lose_nothing(tmp_path, request):
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "Sync").mkdir()
    files = {"git": project / "git.jsonl", "editor": project / "editor.jsonl", "synced": project / "synced.jsonl"}
    files["synced"].symlink_to(tmp_path / "Sync" / "memory.jsonl")  # a memory kept in a synced folder
    for path in files.values():
        path.write_text(SEED)
    registry = tmp_path / "contexts"
    registry.mkdir()
    contexts = [{"name": name, "path": str(path)} for name, path in files.items()]
    (registry / "contexts.json").write_text(json.dumps({"contexts": contexts}))
    env = server_env(MEMORY_CONTEXTS_DIR=registry)
    phases = [
        Phase("inplace", "editor", files["editor"], 6, (0.3, 0.5), []),  # first: the servers load their models
        Phase("rename", "git", files["git"], 50, (0.03, 0.1), []),
        Phase("sync", "synced", files["synced"], 25, (0.03, 0.12), []),
    ]
    for number, phase in enumerate(phases):
        phase.books = [Book(f"s{i}p{number}", random.Random(10 * number + i)) for i in range(SERVERS)]
    ready: list[int] = []
    started = time.monotonic()
    with anyio.fail_after(150):
        async with anyio.create_task_group() as group:
            for index in range(SERVERS):
                group.start_soon(server_life, env, index, ready, phases)
            while len(ready) < SERVERS:
                await anyio.sleep(0.05)
            report(request, f"outside writers: {SERVERS} servers up in {time.monotonic() - started:.1f} s")
            for phase in phases:
                phase.saver.append(Saver(phase.kind, phase.path, phase.saves, phase.pause))
                phase.go.set()
                while len(phase.done) < SERVERS:
                    await anyio.sleep(0.05)
                check_phase(request, phase)
    assert files["synced"].is_symlink()


def check_phase(request: pytest.FixtureRequest, phase: Phase) -> None:
    saver = phase.saver[0]
    errors = saver.close()
    assert saver.process.returncode == 0, errors
    counts = count(phase.path, phase.books, saver)
    refused = [r for b in phase.books for r in b.refused]
    report(
        request,
        f"outside writers, {phase.kind} ({phase.context}): {SERVERS} servers, {len(saver.lines)} outside saves, {counts.acknowledged} "
        f"acknowledged writes: {counts.torn} torn lines, {counts.outside_lost} outside lines lost, "
        f"{counts.acknowledged_lost} writes acknowledged after the last save lost; ({counts.lost_during_saves} "
        f"acknowledged during the saves, overwritten by a save of what the program had read before them; "
        f"{len(refused)} calls refused)",
    )
    assert len(saver.lines) == phase.saves
    assert (counts.torn, counts.outside_lost, counts.acknowledged_lost) == (0, 0, 0)
    assert sum(len(b.after) for b in phase.books) >= SERVERS * 5
    assert not [r for r in refused if "being written by another program" not in r], refused
    folder = phase.path.parent
    assert [p.name for p in folder.iterdir() if p.name.startswith(f".{phase.path.name}.") and p.suffix == ".tmp"] == []
