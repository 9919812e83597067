"""Resources, subscriptions, and seeing changes made by another process, over stdio."""

import json
import os

import anyio
import pytest
from helpers import connect, entity, ok, server_env
from mcp_types import ResourceUpdatedNotification

pytestmark = pytest.mark.anyio


class Updates:
    """Collects notifications/resources/updated, and lets a test wait for one."""

    def __init__(self):
        self.uris: list[str] = []
        self._arrived = anyio.Event()

    async def __call__(self, message) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self._arrived.set()

    async def wait(self, uri: str, timeout: float = 15) -> None:
        with anyio.fail_after(timeout):
            while uri not in self.uris:
                await self._arrived.wait()
                self._arrived = anyio.Event()


async def graph_resource(session, uri="memory://knowledge-graph") -> dict:
    result = await session.read_resource(uri)
    return json.loads(result.contents[0].text)


async def test_resources_are_listed_and_readable(tmp_path):
    env = server_env(MEMORY_FILE_PATH=tmp_path / "m.jsonl")
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Ann", "person", "likes tea")])
        uris = {str(r.uri) for r in (await s.list_resources()).resources}
        assert {"memory://knowledge-graph", "memory://contexts", "memory://contexts/default"} <= uris
        templates = {t.uri_template for t in (await s.list_resource_templates()).resource_templates}
        assert "memory://contexts/{name}" in templates
        assert (await graph_resource(s))["entities"] == [entity("Ann", "person", "likes tea")]
        assert (await graph_resource(s, "memory://contexts/default"))["entities"][0]["name"] == "Ann"
        listing = await graph_resource(s, "memory://contexts")
        assert listing["activeContext"] == "default" and listing["contexts"][0]["entities"] == 1
        with pytest.raises(Exception, match="Unknown context 'nope'"):
            await s.read_resource("memory://contexts/nope")


async def test_a_subscriber_hears_about_our_own_writes(tmp_path):
    updates = Updates()
    async with connect(server_env(MEMORY_FILE_PATH=tmp_path / "m.jsonl"), message_handler=updates) as s:
        await s.subscribe_resource("memory://knowledge-graph")
        await ok(s, "create_entities", entities=[entity("Ann")])
        await updates.wait("memory://knowledge-graph")


async def test_a_change_by_another_process_reaches_the_subscriber_and_the_next_read(tmp_path):
    memory = tmp_path / "shared.jsonl"
    env = server_env(MEMORY_FILE_PATH=memory)
    updates = Updates()
    async with connect(env, message_handler=updates) as watcher, connect(env) as writer:
        assert (await ok(watcher, "read_graph"))["entities"] == []
        await watcher.subscribe_resource("memory://knowledge-graph")
        await watcher.subscribe_resource("memory://contexts/default")
        await anyio.sleep(0.5)  # let the watcher start watching the folder
        await ok(writer, "create_entities", entities=[entity("Bo", "dog", "chases the postman")])
        await updates.wait("memory://knowledge-graph")
        await updates.wait("memory://contexts/default")
        assert [e["name"] for e in (await ok(watcher, "read_graph"))["entities"]] == ["Bo"]
        found = await ok(watcher, "search_nodes", query="who runs after the mail carrier")
        assert found["matches"][0]["observation"] == "chases the postman"
        # an editor rewriting the file by hand is noticed too
        memory.write_text(memory.read_text().replace("postman", "cat"))
        updates.uris.clear()
        await updates.wait("memory://knowledge-graph")
        assert (await graph_resource(watcher))["entities"][0]["observations"] == ["chases the cat"]


async def test_an_idle_server_reads_nothing_when_another_process_writes_and_then_only_what_changed(tmp_path):
    """Issue 14: another process's writes cost an idle server a `stat` each (its subscribers are still told at
    once); its next call reads only the lines those writes changed."""
    memory = tmp_path / "shared.jsonl"
    lines = [{"type": "entity", "name": f"e{i}", "entityType": "t", "observations": ["x"]} for i in range(300)]
    memory.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = tmp_path / "idle-server.log"
    updates = Updates()
    idle_env = server_env(MEMORY_FILE_PATH=memory, MEMORY_LOG_LEVEL="debug")
    with log.open("w") as errlog:
        async with (
            connect(idle_env, errlog=errlog, message_handler=updates) as idle,
            connect(server_env(MEMORY_FILE_PATH=memory)) as writer,
        ):
            assert (await ok(idle, "open_nodes", names=["e1"]))["entities"][0]["observations"] == ["x"]
            await idle.subscribe_resource("memory://knowledge-graph")
            await anyio.sleep(0.5)  # the folder is watched
            loads = log.read_text().count("lines parsed")
            for i in range(5):
                addition = {"entityName": f"e{i * 50}", "contents": [f"new {i}"]}
                await ok(writer, "add_observations", observations=[addition])
                await updates.wait("memory://knowledge-graph")
                updates.uris.clear()
            await anyio.sleep(0.5)
            assert log.read_text().count("lines parsed") == loads  # told, but nothing read
            found = await ok(idle, "open_nodes", names=[f"e{i * 50}" for i in range(5)])
            assert [e["observations"] for e in found["entities"]] == [["x", f"new {i}"] for i in range(5)]
    reads = [line for line in log.read_text().splitlines() if "lines parsed" in line][loads:]
    assert len(reads) == 1 and "followed" in reads[0] and ", 5 lines parsed" in reads[0], reads


async def test_a_change_behind_a_symlinked_memory_file_reaches_the_subscriber(tmp_path):
    # A synced folder or a dotfile manager keeps the memory elsewhere: a save there changes nothing in the
    # folder of the link, so the folder of the file it leads to is watched too.
    synced = tmp_path / "Dropbox"
    synced.mkdir()
    target = synced / "memory.jsonl"
    target.write_text(json.dumps({"type": "entity", "name": "Ann", "entityType": "person", "observations": []}) + "\n")
    home = tmp_path / "dotfiles"  # not "home": server_env makes that one
    home.mkdir()
    (home / "memory.jsonl").symlink_to(target)
    updates = Updates()
    async with connect(server_env(MEMORY_FILE_PATH=home / "memory.jsonl"), message_handler=updates) as s:
        assert [e["name"] for e in (await ok(s, "read_graph"))["entities"]] == ["Ann"]
        await s.subscribe_resource("memory://knowledge-graph")
        await anyio.sleep(0.5)  # let the watcher start watching both folders
        with target.open("a") as synced_file:  # the sync client brings another machine's write
            synced_file.write(json.dumps({"type": "entity", "name": "Bo", "entityType": "dog", "observations": []}))
            synced_file.write("\n")
        await updates.wait("memory://knowledge-graph")
        assert [e["name"] for e in (await graph_resource(s))["entities"]] == ["Ann", "Bo"]


async def test_a_memory_subscribed_to_before_any_call_used_it_and_a_switch_reach_the_subscriber(tmp_path):
    """memory://contexts/work, in a folder of its own that no call of this session has touched, is watched from
    the subscription on; a switch of the active context tells memory://knowledge-graph's subscriber (it shows
    another memory now), and that memory's changes reach it from then on."""
    (tmp_path / "home-memory").mkdir()
    (tmp_path / "work").mkdir()
    contexts = tmp_path / "registry"
    contexts.mkdir()
    registry = {
        "activeContext": "default",
        "contexts": [
            {"name": "default", "path": str(tmp_path / "home-memory" / "memory.jsonl")},
            {"name": "work", "path": str(tmp_path / "work" / "work.jsonl")},
        ],
    }
    (contexts / "contexts.json").write_text(json.dumps(registry))
    env = server_env(MEMORY_CONTEXTS_DIR=contexts)
    updates = Updates()
    async with connect(env, message_handler=updates) as watcher, connect(env) as writer:
        await watcher.subscribe_resource("memory://contexts/work")
        await watcher.subscribe_resource("memory://knowledge-graph")
        await anyio.sleep(0.5)  # the folders are watched
        await ok(writer, "create_entities", context="work", entities=[entity("Rent", "bill")])
        await updates.wait("memory://contexts/work")
        assert "memory://knowledge-graph" not in updates.uris  # not the active memory
        updates.uris.clear()
        await ok(watcher, "set_active_context", name="work")
        await updates.wait("memory://knowledge-graph")
        updates.uris.clear()
        await ok(writer, "add_observations", context="work", observations=[{"entityName": "Rent", "contents": ["due"]}])
        await updates.wait("memory://knowledge-graph")
        assert (await graph_resource(watcher))["entities"][0]["observations"] == ["due"]


async def test_a_file_touched_or_saved_again_unchanged_is_no_change_and_a_change_of_the_same_size_is_one(tmp_path):
    """`touch`, a sync client or an editor saving the same bytes again move only the file's times (or its inode):
    the subscriber is not told of a change that changed nothing; an edit that keeps the size is still a change."""
    memory = tmp_path / "m.jsonl"
    memory.write_text(json.dumps({"type": "entity", "name": "Ann", "entityType": "person", "observations": ["tea"]}))
    updates = Updates()
    async with connect(server_env(MEMORY_FILE_PATH=memory), message_handler=updates) as s:
        await ok(s, "read_graph")
        await s.subscribe_resource("memory://knowledge-graph")
        await anyio.sleep(0.5)  # the folder is watched
        content = memory.read_bytes()
        os.utime(memory, ns=(memory.stat().st_atime_ns, memory.stat().st_mtime_ns + 10**9))  # touch
        (tmp_path / "saved-again").write_bytes(content)
        os.replace(tmp_path / "saved-again", memory)  # the same bytes, by rename
        await anyio.sleep(2)
        assert updates.uris == []
        memory.write_bytes(content.replace(b"tea", b"tee"))  # in place, the same size
        await updates.wait("memory://knowledge-graph")
        assert (await graph_resource(s))["entities"][0]["observations"] == ["tee"]
