"""Memory files that are not what they seem, through the real server over stdio: links swapped between calls, a
project memory linked to package.json, a read-only file, a named pipe, a lock file this user cannot open, and a
lock held too long. Each case was confirmed on main by the review of issue 13; the store-level twins of these tests
are in test_store.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import filelock
import pytest
from helpers import call, connect, entity, failure, ok, server_env, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memory_server.files import lock_path_for

pytestmark = pytest.mark.anyio

LINE = '{{"type":"entity","name":"{0}","entityType":"t","observations":["about {0}"]}}\n'


def with_contexts(folder: Path, **paths: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    entries = [{"name": name, "path": path} for name, path in paths.items()]
    (folder / "contexts.json").write_text(json.dumps({"contexts": entries}))
    return folder


async def names(s: ClientSession, **arguments: str) -> list[str]:
    return [e["name"] for e in (await ok(s, "read_graph", **arguments))["entities"]]


async def test_a_memory_file_swapped_for_a_link_to_bashrc_between_calls_is_refused(tmp_path):
    bashrc = Path(os.environ["HOME"]) / ".bashrc"
    bashrc.write_text("export EDITOR=vi\n")
    memory = tmp_path / "work.jsonl"
    async with connect(server_env(MEMORY_FILE_PATH=memory)) as s:
        await ok(s, "create_entities", entities=[entity("a")])
        memory.unlink()
        memory.symlink_to(bashrc)
        expected = f"{memory} is a symbolic link to {bashrc}, which is not a memory file"
        for tool, arguments in (
            ("create_entities", {"entities": [entity("b")]}),
            ("delete_entities", {"entityNames": ["a"]}),
            ("read_graph", {}),
        ):
            assert expected in await failure(s, tool, **arguments)
    assert bashrc.read_text() == "export EDITOR=vi\n"


async def test_a_project_memory_linked_to_the_projects_package_json_is_refused(tmp_path):
    project = tmp_path / "app"
    (project / ".git").mkdir(parents=True)
    package = project / "package.json"
    package.write_text('{\n  "name": "app"\n}\n')
    (project / ".ai-memory.jsonl").symlink_to("package.json")
    registry = with_contexts(tmp_path / "registry", project="{projectDir}/.ai-memory.jsonl")
    async with connect(server_env(MEMORY_CONTEXTS_DIR=registry, MEMORY_PROJECT_DIR=project)) as s:
        message = await failure(s, "create_entities", entities=[entity("b")], context="project")
        assert f"{project / '.ai-memory.jsonl'} is a symbolic link to {package}, which is not a memory file" in message
        await ok(s, "create_entities", entities=[entity("c")])  # the default context is not affected
    assert package.read_text() == '{\n  "name": "app"\n}\n'


async def test_a_read_only_memory_file_refuses_every_change(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(LINE.format("a") + LINE.format("b"))
    memory.chmod(0o444)
    before = memory.read_bytes()
    async with connect(server_env(MEMORY_FILE_PATH=memory)) as s:
        for tool, arguments in (
            ("create_entities", {"entities": [entity("c")]}),
            ("add_observations", {"observations": [{"entityName": "a", "contents": ["x"]}]}),
            ("delete_entities", {"entityNames": ["b"]}),
            ("delete_observations", {"deletions": [{"entityName": "a", "observations": ["about a"]}]}),
        ):
            assert f"{memory} is read-only (mode 0444)" in await failure(s, tool, **arguments)
        assert await names(s) == ["a", "b"]
    assert memory.read_bytes() == before


async def test_a_named_pipe_is_a_clear_error_and_other_contexts_keep_working(tmp_path):
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    registry = with_contexts(tmp_path / "registry", pipe=str(pipe))
    env = server_env(MEMORY_CONTEXTS_DIR=registry, MEMORY_FILE_PATH=tmp_path / "memory.jsonl")
    try:
        async with connect(env, args=["--lock-timeout", "1"]) as s:
            with anyio.fail_after(15):
                for tool, arguments in (("read_graph", {}), ("create_entities", {"entities": [entity("x")]})):
                    message = await failure(s, tool, context="pipe", **arguments)
                    assert f"{pipe}: it is a named pipe (FIFO), not a regular file" in message
                await ok(s, "create_entities", entities=[entity("a")])
                assert await names(s) == ["a"]
    finally:
        with contextlib.suppress(OSError):  # a server stuck opening the pipe gets its open() back
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))


# ---- the lock --------------------------------------------------------------------------------------------------


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="memory-other-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def connect_as_other_user(env: dict[str, str], home: Path) -> AsyncIterator[ClientSession]:
    """The server as a user who did not make the lock file: `nobody` when the tests run as root, else ourselves
    (then the lock file's mode alone keeps us out)."""
    command = [sys.executable, "-m", "memory_server"]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        for folder in (home, *home.iterdir()):
            os.chown(folder, 65534, 65534)
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.mark.parametrize("case", ["lock file left by sudo", "read-only folder"])
async def test_a_lock_this_user_cannot_take_blocks_writes_but_not_reads(shared_folder, case):
    memory = shared_folder / "memory" / "memory.jsonl"
    memory.parent.mkdir(mode=0o755)
    memory.write_text(LINE.format("a"))
    memory.chmod(0o644)
    lock = lock_path_for(memory)
    if case == "lock file left by sudo":  # the folder is the server user's, the lock file is not writable for it
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text("")
        lock.chmod(0o444)
        if os.geteuid() == 0:
            os.chown(memory.parent, 65534, 65534)
    else:  # no lock file, and none can be made
        memory.parent.chmod(0o555)
    home = shared_folder / "home"
    home.mkdir()
    users = {name: home / name.lower() for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
    for folder in users.values():
        folder.mkdir()
    env = server_env(MEMORY_FILE_PATH=memory, **users)
    try:
        async with connect_as_other_user(env, home) as s:
            result = await ok(s, "read_graph")
            assert [e["name"] for e in result["entities"]] == ["a"]
            if case == "lock file left by sudo":
                [warning] = result["warnings"]
                assert f"{memory} was read without its lock ({lock}: permission denied)" in warning
            else:  # no lock file, so no writer of ours is at work: a read needs none and creates none
                assert "warnings" not in result
            message = await failure(s, "create_entities", entities=[entity("b")])
            assert f"Cannot lock {lock}: permission denied" in message and "reading still works" in message
    finally:
        memory.parent.chmod(0o755)
    assert memory.read_text() == LINE.format("a")


async def test_a_read_goes_on_without_a_lock_another_process_holds_and_says_so(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(LINE.format("a"))
    async with connect(server_env(MEMORY_FILE_PATH=memory), args=["--lock-timeout", "3"]) as s:
        assert await names(s) == ["a"]
        with filelock.FileLock(lock_path_for(memory)):  # another process holds the lock for long...
            memory.write_text(LINE.format("a") + LINE.format("b"))  # ...and the file changed: it must be read again
            await anyio.sleep(0.6)
            started = time.monotonic()
            result = await call(s, "read_graph")
            waited = time.monotonic() - started
            assert not result.is_error, text_of(result)  # the file as it is, with a warning
            assert '"b"' in text_of(result) and "read without its lock" in text_of(result)
            assert waited < 3, f"a read under a 3 s lock timeout waited {waited:.1f} s"
            refused = await call(s, "create_entities", entities=[{"name": "c", "entityType": "t", "observations": []}])
            assert refused.is_error and "within 3 s" in text_of(refused)  # a write never goes on without it
        assert await names(s) == ["a", "b"]


async def test_calls_queued_behind_a_held_lock_each_wait_at_most_the_lock_timeout(tmp_path):
    # Calls are served one at a time, in order; the lock timeout bounds each as its caller sees it, waiting behind
    # the others included (it used to restart for each: 3, 6, 9, 12 s).
    memory = tmp_path / "memory.jsonl"
    memory.write_text(LINE.format("a"))
    async with connect(server_env(MEMORY_FILE_PATH=memory), args=["--lock-timeout", "2"]) as s:
        assert await names(s) == ["a"]
        # A first write loads what writes need (the SDK, pydantic): on a busy machine that alone took 1.6 s
        invalid = await call(s, "create_entities", entities=[{"name": "b"}])
        assert invalid.is_error
        waits: list[float] = []

        async def write(name: str) -> None:
            started = time.monotonic()
            result = await call(s, "create_entities", entities=[{"name": name, "entityType": "t", "observations": []}])
            waits.append(time.monotonic() - started)
            assert result.is_error and "within 2 s" in text_of(result)

        with filelock.FileLock(lock_path_for(memory)):
            async with anyio.create_task_group() as group:
                for name in "bcde":
                    group.start_soon(write, name)
        assert len(waits) == 4 and max(waits) < 3.5, waits
        assert memory.read_text() == LINE.format("a")
