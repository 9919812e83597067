"""The registry and the resources when the world misbehaves, driven over stdio by the SDK's client: contexts.json
being saved by an editor, paths holding control characters, folders that cannot be created, odd names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import call, connect, entity, failure, jsonl, ok, server_env, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio


def registry_file(config: Path) -> Path:
    return config / "mcp-memory-contexts" / "contexts.json"


def write_registry(config: Path, data: dict | str) -> Path:
    file = registry_file(config)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return file


async def test_a_session_keeps_its_context_while_contexts_json_is_briefly_unusable(tmp_path, user_folders):
    config = Path(user_folders["XDG_CONFIG_HOME"])
    work, default = tmp_path / "work.jsonl", tmp_path / "default.jsonl"
    good = json.dumps({"contexts": [{"name": "work", "path": str(work)}]})
    registry = write_registry(config, good)
    async with connect(server_env(MEMORY_FILE_PATH=default)) as s:
        await ok(s, "set_active_context", name="work")
        for step, moment in enumerate(["", '{"contexts": [{"name": "wo', None]):  # emptied, half saved, gone
            if moment is None:
                registry.unlink()
            else:
                registry.write_text(moment)
            done = await ok(s, "create_entities", entities=[entity(f"during-{step}")])
            assert done["context"]["name"] == "work" and done["context"]["path"] == str(work)
            assert any("cannot be used right now" in w for w in done["warnings"]), done["warnings"]
        registry.write_text(good)  # the editor is done
        after = await ok(s, "create_entities", entities=[entity("after")])
        assert after["context"]["name"] == "work" and "warnings" not in after
        assert (await ok(s, "get_active_context"))["active"]["name"] == "work"
    assert [e["name"] for e in jsonl(work)] == ["during-0", "during-1", "during-2", "after"]
    assert not default.exists(), "a write meant for 'work' went to the default memory"


async def test_paths_and_markers_with_control_characters_are_refused_with_a_clear_error(tmp_path, user_folders):
    config = Path(user_folders["XDG_CONFIG_HOME"])
    async with connect() as s:
        await ok(s, "list_contexts")  # creates contexts.json
        before = registry_file(config).read_bytes()
        for arguments in (
            {"name": "nul", "path": str(tmp_path / "a\x00b.jsonl")},
            {"name": "newline", "path": str(tmp_path / "a\nb.jsonl")},
            {"name": "marker", "path": "{projectDir}/.ai-memory.jsonl", "markers": [".git\x00"]},
        ):
            message = await failure(s, "add_context", **arguments)
            assert "control character" in message and "Error executing tool" not in message, message
        assert registry_file(config).read_bytes() == before
        assert (await ok(s, "create_entities", entities=[entity("still fine")]))["context"]["name"] == "default"
        await ok(s, "add_context", name="proj", path="{projectDir}/.ai-memory.jsonl")
        message = await failure(s, "read_graph", context="proj", projectDir=str(tmp_path / "a\x00b"))
        assert "control character" in message and "unexpected error" not in message, message
        listed = await ok(s, "list_contexts", projectDir=str(tmp_path / "a\x00b"))  # the others still listed
        proj = next(c for c in listed["contexts"] if c["name"] == "proj")
        assert "control character" in proj["unresolvedReason"] and listed["activeContext"] == "default"


async def test_a_registry_entry_with_a_nul_is_ignored_with_its_line_and_the_server_serves(tmp_path, user_folders):
    config = Path(user_folders["XDG_CONFIG_HOME"])
    text = json.dumps(
        {"activeContext": "broken", "contexts": [{"name": "broken", "path": str(tmp_path / "a\x00b.jsonl")}]}, indent=2
    )
    registry = write_registry(config, text)
    line = text.splitlines().index('      "name": "broken",') + 1
    async with connect(server_env(MEMORY_FILE_PATH=tmp_path / "default.jsonl")) as s:  # as after persist=true
        done = await ok(s, "create_entities", entities=[entity("Ann")])
        assert done["context"]["name"] == "default"
        warnings = " ".join(done["warnings"])
        assert f"{registry}: line {line}, context #1: 'path'" in warnings and "control character" in warnings
        assert [c["name"] for c in (await ok(s, "list_contexts"))["contexts"]] == ["default"]
    assert registry.read_text() == text


FSIZE_LIMITED = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64)); "
    "sys.dont_write_bytecode = True; "  # a .pyc cut at the limit would be left in the tree
    "from memory_server.cli import cli; cli(*sys.argv[1:])"
)


@pytest.mark.parametrize("trouble", ["config folder is a file", "disk full"])
async def test_a_server_that_cannot_create_its_folders_starts_and_says_why_in_every_result(
    tmp_path, user_folders, trouble
):
    """RLIMIT_FSIZE stands in for a full disk (files cannot grow past 64 bytes), and a file where the config folder
    should be for a folder that cannot be created: both stop root too, unlike file modes."""
    if trouble == "disk full":
        reason, args = "File too large", ["-c", FSIZE_LIMITED]
        env = server_env()
    else:
        reason, args = "Not a directory", ["-m", "memory_server"]
        blocker = tmp_path / "blocker"
        blocker.write_text("a file where the folder should be")
        env = server_env(XDG_CONFIG_HOME=blocker)
    params = StdioServerParameters(command=sys.executable, args=[*args, "--embedding-model", "none"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()  # answered: no traceback at start
        results = [
            await call(s, "read_graph"),
            await call(s, "list_contexts"),
            await call(s, "get_active_context"),
            await call(s, "search_nodes", query="x"),
        ]
        refused = await failure(s, "add_context", name="work", path=str(tmp_path / "work.jsonl"))
    for result in results:
        assert not result.is_error, text_of(result)
        [warning] = result.structured_content["warnings"]
        assert "contexts.json cannot be used (it could not be created" in warning and reason in warning, warning
        assert "No such file" not in warning
    assert reason in refused


async def test_an_empty_context_name_in_a_resource_uri_serves_no_graph(tmp_path):
    async with connect(server_env(MEMORY_FILE_PATH=tmp_path / "memory.jsonl")) as s:
        await ok(s, "create_entities", entities=[entity("secret of the active context")])
        with pytest.raises(MCPError, match="needs a context name"):
            await s.read_resource("memory://contexts/")
        graph = json.loads((await s.read_resource("memory://contexts/default")).contents[0].text)
        assert [e["name"] for e in graph["entities"]] == ["secret of the active context"]


async def test_a_huge_unknown_context_name_is_not_echoed_back(tmp_path):
    huge = "z" * 1_000_000
    async with connect(server_env(MEMORY_FILE_PATH=tmp_path / "memory.jsonl")) as s:
        messages = [
            await failure(s, "read_graph", context=huge),
            await failure(s, "set_active_context", name=huge),
            await failure(s, "remove_context", name=huge),
            await failure(s, "add_context", name=huge, path=str(tmp_path / "x.jsonl")),
            await failure(s, "add_context", name="x", path=huge),
        ]
        with pytest.raises(MCPError) as resource:
            await s.read_resource(f"memory://contexts/{huge}")
    for message in messages:
        assert len(message) < 1_000 and "(1,000,000 characters)" in message, message[:300]
    error = resource.value.error  # the SDK's own "Unknown resource: <uri>", and the uri again in its data
    assert len(error.message) < 1_100 and len(json.dumps(error.data)) < 1_100 and "characters)" in error.message
