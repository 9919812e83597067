"""Reliability: many server processes on one file, writers killed mid-write, a full disk, a held lock, clean stdout.

Each test states its claim in its name and prints its figures (writes acknowledged, kills, leftovers swept) on the
terminal, so a run of `pytest tests/test_reliability.py` gives the numbers for the closing note.
"""

from __future__ import annotations

import contextlib
import json
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import filelock
import pytest
from helpers import call, connect, entity, failure, jsonl, ok, relation, server_env, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memory_server.graph import Entity, KnowledgeGraph, encode_entity
from memory_server.store import GraphStore

pytestmark = pytest.mark.anyio


def report(request: pytest.FixtureRequest, line: str) -> None:
    """Show a figure on the terminal even while pytest captures output."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\n[reliability] {line}")


def temp_files(memory: Path) -> set[Path]:
    return set(memory.parent.glob(f".{memory.name}.*.tmp"))


def parse_cleanly(memory: Path) -> KnowledgeGraph:
    """The file as the server would load it; every line must be an entity or a relation."""
    graph = KnowledgeGraph.parse(memory.read_text(encoding="utf-8"))
    assert graph.skipped_lines() == []
    return graph


def write_entities(memory: Path, entities: Iterable[Entity]) -> None:
    memory.write_text("".join(encode_entity(e) + "\n" for e in entities), encoding="utf-8")


# ---- many writers ----------------------------------------------------------------------------------------------

WRITERS = 4
STEPS = 100
SHARED = [f"shared-{k}" for k in range(3)]  # created before the writers start; nobody deletes them


@dataclass
class Ledger:
    """What one writer's acknowledged calls did to the items it owns: its entities, its relations, and its own
    observations on the shared entities. No other writer touches these, so they fix the final state exactly."""

    tag: str
    rng: random.Random
    entities: dict[str, list[str]] = field(default_factory=dict)
    relations: set[tuple[str, str, str]] = field(default_factory=set)
    shared: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in SHARED})
    counter: int = 0
    calls: dict[str, int] = field(default_factory=dict)

    def new(self, kind: str) -> str:
        self.counter += 1
        return f"{self.tag}-{kind}{self.counter}"

    def observations_of(self, name: str) -> list[str]:
        return self.shared[name] if name in self.shared else self.entities[name]


async def create_some(s: ClientSession, book: Ledger) -> None:
    new = [entity(book.new("e"), "thing", book.new("o")) for _ in range(book.rng.randint(1, 3))]
    batch = new + [entity(book.rng.choice(SHARED), "shared")] * book.rng.randint(0, 1)  # exists: skipped
    added = await ok(s, "create_entities", entities=batch)
    assert added["entities"] == new
    for item in new:
        book.entities[item["name"]] = list(item["observations"])


async def relate_some(s: ClientSession, book: Ledger) -> None:
    source = book.rng.choice(sorted(book.entities))
    target = book.rng.choice(sorted(book.entities) + SHARED)
    new = relation(source, target, book.new("r"))
    batch = [new, *[relation(*key) for key in book.rng.sample(sorted(book.relations), min(1, len(book.relations)))]]
    added = await ok(s, "create_relations", relations=batch)
    assert added["relations"] == [new]  # the repeated one already exists
    book.relations.add((source, target, new["relationType"]))


async def observe(s: ClientSession, book: Ledger) -> None:
    name = book.rng.choice(sorted(book.entities) + SHARED)
    known = book.observations_of(name)
    fresh = book.new("o")
    added = await ok(s, "add_observations", observations=[{"entityName": name, "contents": [fresh, *known[:1]]}])
    assert added["results"] == [{"entityName": name, "addedObservations": [fresh]}]
    known.append(fresh)


async def forget(s: ClientSession, book: Ledger) -> None:
    name = book.rng.choice(sorted(book.entities))
    await ok(s, "delete_entities", entityNames=[name, f"{book.tag}-ghost"])
    del book.entities[name]
    book.relations = {key for key in book.relations if name not in key[:2]}


async def unobserve(s: ClientSession, book: Ledger) -> None:
    candidates = [n for n in sorted(book.entities) + SHARED if book.observations_of(n)]
    if not candidates:
        return await observe(s, book)
    name = book.rng.choice(candidates)
    doomed = book.rng.choice(book.observations_of(name))
    await ok(s, "delete_observations", deletions=[{"entityName": name, "observations": [doomed, "never there"]}])
    book.observations_of(name).remove(doomed)


async def unrelate(s: ClientSession, book: Ledger) -> None:
    if not book.relations:
        return await relate_some(s, book)
    key = book.rng.choice(sorted(book.relations))
    await ok(s, "delete_relations", relations=[relation(*key), relation(key[0], key[1], "never there")])
    book.relations.discard(key)


MUTATIONS = {
    create_some: 4,
    relate_some: 3,
    observe: 3,
    forget: 1,
    unobserve: 2,
    unrelate: 1,
}


async def write_stream(env: dict[str, str], book: Ledger) -> None:
    async with connect(env) as s:
        for _ in range(STEPS):
            if len(book.entities) < 2:
                step = create_some
            else:
                step = book.rng.choices(list(MUTATIONS), weights=list(MUTATIONS.values()))[0]
            await step(s, book)
            book.calls[step.__name__] = book.calls.get(step.__name__, 0) + 1


async def read_until(env: dict[str, str], done: anyio.Event, seen: list[int]) -> None:
    """A client reading while the writers write: every read is a consistent graph with no unreadable line."""
    async with connect(env) as s:
        while not done.is_set():
            for tool, arguments in (
                ("read_graph", {}),
                ("search_nodes", {"query": "shared"}),
                ("open_nodes", {"names": SHARED}),
            ):
                graph = await ok(s, tool, **arguments)
                assert "warnings" not in graph, graph["warnings"]
                names = {e["name"] for e in graph["entities"]}
                if tool == "read_graph":
                    assert all(r["from"] in names and r["to"] in names for r in graph["relations"])
                    assert set(SHARED) <= names
                seen.append(len(names))


def expected_state(books: list[Ledger]) -> tuple[dict[str, tuple[str, list[str]]], set[tuple[str, str, str]]]:
    entities = {name: ("shared", sorted(o for b in books for o in b.shared[name])) for name in SHARED}
    relations: set[tuple[str, str, str]] = set()
    for book in books:
        entities.update({name: ("thing", sorted(obs)) for name, obs in book.entities.items()})
        relations |= book.relations
    return entities, relations


async def test_four_servers_writing_one_file_lose_no_acknowledged_change(tmp_path, request):
    memory = tmp_path / "shared.jsonl"
    write_entities(memory, (Entity(name, "shared", []) for name in SHARED))
    env = server_env(MEMORY_FILE_PATH=memory)
    books = [Ledger(f"w{w}", random.Random(1000 + w)) for w in range(WRITERS)]
    done, reads = anyio.Event(), []
    started = time.monotonic()

    async def writers() -> None:
        async with anyio.create_task_group() as group:
            for book in books:
                group.start_soon(write_stream, env, book)
        done.set()

    with anyio.fail_after(50):
        async with anyio.create_task_group() as group:
            group.start_soon(writers)
            group.start_soon(read_until, env, done, reads)

    lines = jsonl(memory)  # every line parses as JSON
    graph = parse_cleanly(memory)
    found = {e.name: (e.entity_type, sorted(e.observations)) for e in graph.entities.values()}
    entities, relations = expected_state(books)
    assert found == entities
    assert set(graph.relations) == relations
    assert len(lines) == len(entities) + len(relations)  # no name or relation stored twice
    assert temp_files(memory) == set()
    calls = {name: sum(b.calls.get(name, 0) for b in books) for name in (f.__name__ for f in MUTATIONS)}
    assert all(calls.values()), calls
    report(
        request,
        f"many writers: {WRITERS} servers x {STEPS} acknowledged mutations {calls}, {len(reads)} concurrent reads, "
        f"final file {len(entities)} entities / {len(relations)} relations, 0 lost, "
        f"{time.monotonic() - started:.1f} s",
    )


# ---- crashes ---------------------------------------------------------------------------------------------------

KILLS = 30

# Writes until killed, printing each write once it is acknowledged (GraphStore.mutate has returned).
CRASH_WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from memory_server.graph import Entity
    from memory_server.store import GraphStore

    store = GraphStore(Path(sys.argv[1]))
    run = sys.argv[2]
    rng = random.Random()
    with store.reading() as graph:  # the first time the store takes the lock: leftovers are swept here
        known = list(graph.entities)
    print("ready", flush=True)
    for i in range(10**9):
        name = f"{run}-{i}"
        if rng.random() < 0.4:  # a new observation rewrites the whole file atomically
            target = rng.choice(known)
            store.mutate(lambda g: g.add_observations([(target, [name])]))
            print("observation", target, name, flush=True)
        else:  # a small entity is appended; a big one does not fit one page and is written atomically
            size = rng.choice([10, 10, 10, 6000])
            store.mutate(lambda g: g.create_entities([Entity(name, "t", ["x" * size])]))
            known.append(name)
            print("entity", name, flush=True)
    """
)


@dataclass
class Acknowledged:
    entities: set[str]
    observations: set[tuple[str, str]]

    @classmethod
    def from_output(cls, output: str) -> Acknowledged:
        complete = output.splitlines(keepends=True)
        words = [line.split() for line in complete if line.endswith("\n")]  # a torn last line was not acknowledged
        return cls(
            {w[1] for w in words if w[0] == "entity"},
            {(w[1], w[2]) for w in words if w[0] == "observation"},
        )


def start_crash_writer(memory: Path, run: str, log: Path) -> subprocess.Popen[str]:
    with open(log, "w") as stderr:
        writer = subprocess.Popen(
            [sys.executable, "-c", CRASH_WRITER, str(memory), run],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=server_env(),
        )
    assert writer.stdout is not None
    first = writer.stdout.readline()
    assert first == "ready\n", log.read_text()
    return writer


def kill(writer: subprocess.Popen[str], log: Path) -> str:
    """SIGKILL the writer; what it had printed. Read through the same buffered pipe as `ready` was."""
    writer.send_signal(signal.SIGKILL)
    assert writer.stdout is not None
    with writer.stdout:
        output = writer.stdout.read()
    assert writer.wait(timeout=10) == -signal.SIGKILL, f"the writer failed before the kill:\n{log.read_text()}"
    return output


def check_after_kill(memory: Path, run: str, acked: Acknowledged) -> int:
    """Everything acknowledged is there; besides it, at most the one write that was in flight. Returns its count."""
    graph = parse_cleanly(memory)
    assert acked.entities <= set(graph.entities)
    for target, observation in acked.observations:
        assert observation in graph.entities[target].observations
    ours_entities = {name for name in graph.entities if name.startswith(f"{run}-")}
    ours_observations = {
        (e.name, o) for e in graph.entities.values() for o in e.observations if o.startswith(f"{run}-")
    }
    in_flight = len(ours_entities - acked.entities) + len(ours_observations - acked.observations)
    assert in_flight <= 1, (ours_entities - acked.entities, ours_observations - acked.observations)
    return in_flight


def test_a_writer_killed_at_random_moments_loses_no_acknowledged_write(tmp_path, request):
    memory = tmp_path / "memory.jsonl"
    write_entities(memory, (Entity(f"seed-{i}", "t", [f"fact {i}" * 5]) for i in range(1000)))  # ~100 kB rewrites
    rng = random.Random(5)
    acknowledged = in_flight = leftovers_swept = 0
    started = time.monotonic()
    for attempt in range(KILLS):
        leftovers = temp_files(memory)
        planted = memory.with_name(f".{memory.name}.{attempt:016x}.tmp")
        planted.write_text("half a write")  # as a writer killed in write_atomically leaves it
        run = f"r{attempt}"
        log = tmp_path / f"writer-{run}.log"
        writer = start_crash_writer(memory, run, log)
        assert not (leftovers | {planted}) & temp_files(memory), "the next start must sweep the leftovers"
        leftovers_swept += len(leftovers) + 1
        time.sleep(rng.uniform(0.02, 0.4))
        acked = Acknowledged.from_output(kill(writer, log))
        in_flight += check_after_kill(memory, run, acked)
        acknowledged += len(acked.entities) + len(acked.observations)
    assert acknowledged > KILLS
    real_leftovers = temp_files(memory)
    with GraphStore(memory).reading():  # a fresh start sweeps what the last kill left
        pass
    assert temp_files(memory) == set()
    report(
        request,
        f"crashes: {KILLS} SIGKILLs, {acknowledged} acknowledged writes all present, {in_flight} unacknowledged "
        f"in-flight writes found on disk, {leftovers_swept - KILLS} real + {KILLS} planted temp files swept at the "
        f"next start ({len(real_leftovers)} more after the last kill), {time.monotonic() - started:.1f} s",
    )


# ---- faults ----------------------------------------------------------------------------------------------------

# The server with RLIMIT_FSIZE: any write past `limit` bytes fails with EFBIG, as on a full disk (and unlike file
# modes, this also stops root). Python ignores SIGXFSZ, so the write returns the error instead of killing us.
FULL_DISK_SERVER = (
    "import resource, sys; limit = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
    "sys.dont_write_bytecode = True; "  # a .pyc cut at the limit would be left in the tree
    "from memory_server.cli import cli; cli(*sys.argv[2:])"
)


@contextlib.asynccontextmanager
async def connect_command(env: dict[str, str], *args: str) -> AsyncIterator[ClientSession]:
    """Like helpers.connect, for a server started by any Python command line."""
    params = StdioServerParameters(command=sys.executable, args=list(args), env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def names_read(s: ClientSession) -> list[str]:
    return [e["name"] for e in (await ok(s, "read_graph"))["entities"]]


async def test_a_full_disk_is_a_clear_error_and_leaves_the_file_byte_for_byte(tmp_path):
    memory = tmp_path / "memory.jsonl"
    write_entities(memory, (Entity(f"entity {i}", "t", [f"fact {i}"]) for i in range(30)))
    before = memory.read_bytes()
    assert len(before) + 500 < 4096  # so that the second call below takes the append path
    limit = len(before) + 150
    env = server_env(MEMORY_FILE_PATH=memory)
    async with connect_command(env, "-c", FULL_DISK_SERVER, str(limit), "--log-level", "info") as s:
        failing = [
            ("add_observations", {"observations": [{"entityName": "entity 1", "contents": ["x" * 5000]}]}),  # rewrite
            ("create_entities", {"entities": [entity("big", "t", "y" * 400)]}),  # append, cut short by the limit
            ("create_entities", {"entities": [entity(f"new {i}") for i in range(100)]}),  # too big to append
        ]
        for tool, arguments in failing:
            with anyio.fail_after(20):
                result = await call(s, tool, **arguments)
            assert result.is_error, text_of(result)
            message = text_of(result)
            assert f"Cannot write memory file {memory}" in message and "File too large" in message
            assert memory.read_bytes() == before
            assert await names_read(s) == [f"entity {i}" for i in range(30)]  # nothing half-applied in memory
        await ok(s, "create_entities", entities=[entity("fits")])  # the server carries on once there is room
        assert (await names_read(s))[-1] == "fits"
    assert memory.read_bytes().startswith(before)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


async def test_a_lock_held_too_long_is_a_clear_error_not_a_hang(tmp_path):
    memory = tmp_path / "memory.jsonl"
    write_entities(memory, [Entity("a", "t", [])])
    before = memory.read_bytes()
    env = server_env(MEMORY_FILE_PATH=memory)
    async with connect(env, args=["--lock-timeout", "0.5"]) as s:
        with filelock.FileLock(f"{memory}.lock"):
            for tool, arguments in (
                ("create_entities", {"entities": [entity("b")]}),
                ("delete_entities", {"entityNames": ["a"]}),
                ("add_observations", {"observations": [{"entityName": "a", "contents": ["x"]}]}),
            ):
                started = time.monotonic()
                with anyio.fail_after(10):
                    message = await failure(s, tool, **arguments)
                assert time.monotonic() - started < 5
                assert f"Could not lock {memory}.lock within 0.5 s" in message
                assert memory.read_bytes() == before
        await ok(s, "create_entities", entities=[entity("b")])  # the lock is free again: the write goes through
        assert await names_read(s) == ["a", "b"]


# ---- stdio hygiene ---------------------------------------------------------------------------------------------


def jsonrpc(message_id: int | None, method: str, params: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if message_id is not None:
        message["id"] = message_id
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def tool_call(message_id: int, name: str, arguments: Any) -> str:
    return jsonrpc(message_id, "tools/call", {"name": name, "arguments": arguments})


def is_jsonrpc_message(line: str) -> bool:
    try:
        message = json.loads(line)
    except ValueError:
        return False
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "method" in message:
        return isinstance(message["method"], str)
    return "id" in message and (("result" in message) ^ ("error" in message))


def converse(requests: list[str], answers: int, env: dict[str, str]) -> tuple[list[str], str]:
    """Send raw lines to a server with full debug logging; every line of its stdout (until it exits) and its stderr.
    Waits for the answers to request ids 1..`answers` before closing stdin."""
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "--log-level", "debug"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []

    def pump(stream: IO[str]) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, args=(server.stdout,))
    drain = threading.Thread(target=lambda: errors.extend(server.stderr))
    reader.start()
    drain.start()
    stdout: list[str] = []
    try:
        server.stdin.write("".join(r + "\n" for r in requests))
        server.stdin.flush()
        answered: set[Any] = set()
        while not answered >= set(range(1, answers + 1)):
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                raise AssertionError(f"unanswered: {set(range(1, answers + 1)) - answered}") from None
            assert line is not None, "the server exited early:\n" + "".join(errors)
            stdout.append(line)
            assert is_jsonrpc_message(line), line
            answered.add(json.loads(line).get("id"))
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        finally:
            server.kill()
            reader.join(10)
            drain.join(10)
            server.stdout.close()
            server.stderr.close()
    while (line := lines.get_nowait()) is not None:
        stdout.append(line)
    return stdout, "".join(errors)


def test_nothing_but_json_rpc_reaches_stdout(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text('{"type":"entity","name":"a","entityType":"t","observations":[]}\nnot json at all\n')
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    requests = [
        jsonrpc(1, "initialize", hello),
        jsonrpc(None, "notifications/initialized"),
        jsonrpc(2, "tools/list"),
        tool_call(3, "read_graph", {}),  # the unreadable line: a warning in the result, a log on stderr
        tool_call(4, "create_entities", {"entities": [entity("b")]}),
        tool_call(5, "add_observations", {"observations": [{"entityName": "ghost", "contents": ["x"]}]}),
        tool_call(6, "create_entities", {"entities": 7}),
        tool_call(7, "no_such_tool", {}),
        "{this is not json",
        jsonrpc(8, "no/such/method"),
        tool_call(9, "set_active_context", {"name": "nowhere"}),
        tool_call(10, "read_graph", [1, 2]),
        jsonrpc(11, "ping"),
    ]
    # Python warnings on, and development mode (more warnings, asyncio debug logging): all of it must go to stderr.
    env = server_env(MEMORY_FILE_PATH=memory, PYTHONWARNINGS="always", PYTHONDEVMODE="1")
    stdout, stderr = converse(requests, 11, env)
    assert all(line.endswith("\n") and is_jsonrpc_message(line) for line in stdout), stdout
    assert "Memory server" in stderr and "DEBUG" in stderr  # the logs went to stderr
