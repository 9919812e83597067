"""The nine tools of the official memory server, driven over stdio by the SDK's client."""

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from helpers import call, connect, entity, failure, jsonl, ok, relation, server_env, text_of

pytestmark = pytest.mark.anyio

# tools/list of @modelcontextprotocol/server-memory 2026.8.31, as it answered (bench/vs_upstream.py installs it).
OFFICIAL_TOOLS = json.loads((Path(__file__).parent / "data" / "official_tools.json").read_text(encoding="utf-8"))

UPSTREAM_TOOLS = {
    # name: (title, annotations (readOnly, destructive, idempotent, openWorld), required input, structured keys)
    "create_entities": ("Create Entities", (False, False, False, False), ["entities"], {"entities"}),
    "create_relations": ("Create Relations", (False, False, False, False), ["relations"], {"relations"}),
    "add_observations": ("Add Observations", (False, False, False, False), ["observations"], {"results"}),
    "delete_entities": ("Delete Entities", (False, True, True, False), ["entityNames"], {"success", "message"}),
    "delete_observations": ("Delete Observations", (False, True, True, False), ["deletions"], {"success", "message"}),
    "delete_relations": ("Delete Relations", (False, True, True, False), ["relations"], {"success", "message"}),
    "read_graph": ("Read Graph", (True, False, True, False), [], {"entities", "relations"}),
    "search_nodes": ("Search Nodes", (True, False, True, False), ["query"], {"entities", "relations"}),
    "open_nodes": ("Open Nodes", (True, False, True, False), ["names"], {"entities", "relations"}),
}


@pytest.fixture
def memory(tmp_path):
    return tmp_path / "memory.jsonl"


@pytest.fixture
def env(memory):
    return server_env(MEMORY_FILE_PATH=memory)


async def test_tools_match_the_official_server(env):
    async with connect(env) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    for name, (title, hints, required, keys) in UPSTREAM_TOOLS.items():
        tool = tools[name]
        assert tool.title == title
        annotations = tool.annotations
        assert (
            annotations.read_only_hint,
            annotations.destructive_hint,
            annotations.idempotent_hint,
            annotations.open_world_hint,
        ) == hints
        assert tool.input_schema.get("required", []) == required
        assert keys <= set(tool.output_schema["properties"])
        assert keys <= set(tool.output_schema.get("required", []))
    entity_items = tools["create_entities"].input_schema["properties"]["entities"]["items"]
    assert entity_items["properties"]["name"]["description"] == "The name of the entity"
    assert entity_items["required"] == ["name", "entityType", "observations"]
    assert tools["search_nodes"].input_schema["properties"]["query"]["description"] == (
        "The search query to match against entity names, types, and observation content"
    )
    assert tools["create_relations"].description == (
        "Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"
    )


def official_texts(schema, path=""):
    """Every description, type and required list of an official schema, by where it is."""
    found = {}
    if isinstance(schema, dict):
        for key in ("description", "type", "required"):
            if key in schema:
                found[f"{path}/{key}"] = schema[key]
        for name, sub in schema.get("properties", {}).items():
            found.update(official_texts(sub, f"{path}/{name}"))
        if "items" in schema:
            found.update(official_texts(schema["items"], f"{path}[]"))
    return found


async def test_the_nine_tools_keep_the_official_texts_and_the_list_stays_lean(env):
    async with connect(env) as session:
        tools = (await session.list_tools()).tools
    ours = {tool.name: tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools}
    for official in OFFICIAL_TOOLS["tools"]:
        tool = ours[official["name"]]
        assert (tool["title"], tool["description"]) == (official["title"], official["description"])
        for part in ("inputSchema", "outputSchema"):
            theirs = official_texts(official[part])
            mine = official_texts(tool[part])
            # Every official text is ours too, unchanged; output items may lack observations (detail='names').
            changed = {k: (v, mine.get(k)) for k, v in theirs.items() if mine.get(k) != v and not k.endswith("required")}
            assert not changed, (official["name"], part, changed)
        assert tool["inputSchema"].get("required", []) == official["inputSchema"].get("required", [])
    size = len(json.dumps({"tools": list(ours.values())}))
    print(f"tools/list: {size:,} characters")
    assert size <= 17_500, f"tools/list is {size:,} characters"


async def test_every_tool_end_to_end(env, memory):
    async with connect(env) as s:
        created = await ok(
            s, "create_entities", entities=[entity("Ann", "person", "likes hiking"), entity("Shop", "project")]
        )
        assert [e["name"] for e in created["entities"]] == ["Ann", "Shop"]
        assert created["context"] == {"name": "default", "path": str(memory), "readOnly": False}
        again = await ok(
            s, "create_entities", entities=[entity("Ann", "robot"), entity("Bo", "dog"), entity("Bo", "x")]
        )
        assert again["entities"] == [entity("Bo", "dog")]

        rels = await ok(s, "create_relations", relations=[relation("Ann", "Shop", "works on")] * 2)
        assert rels["relations"] == [relation("Ann", "Shop", "works on")]
        assert "Entity with name Ghost not found" in await failure(
            s, "create_relations", relations=[relation("Ann", "Bo", "walks"), relation("Ann", "Ghost", "knows")]
        )

        added = await ok(
            s, "add_observations", observations=[{"entityName": "Ann", "contents": ["likes hiking", "new"]}]
        )
        assert added["results"] == [{"entityName": "Ann", "addedObservations": ["new"]}]
        before = memory.read_bytes()
        assert "Entity with name Nobody not found" in await failure(
            s,
            "add_observations",
            observations=[{"entityName": "Ann", "contents": ["x"]}, {"entityName": "Nobody", "contents": ["y"]}],
        )
        assert memory.read_bytes() == before

        found = await ok(s, "search_nodes", query="HIK", mode="keyword")
        assert [e["name"] for e in found["entities"]] == ["Ann"]
        assert found["relations"] == [relation("Ann", "Shop", "works on")]
        opened = await ok(s, "open_nodes", names=["Shop", "Shop", "Ghost"])
        assert [e["name"] for e in opened["entities"]] == ["Shop"]
        assert opened["relations"] == [relation("Ann", "Shop", "works on")]

        deleted = await ok(s, "delete_observations", deletions=[{"entityName": "Ann", "observations": ["new"]}])
        assert deleted["success"] is True and deleted["message"] == "Observations deleted successfully"
        deleted = await ok(s, "delete_relations", relations=[relation("Ann", "Shop", "works on")])
        assert deleted["message"] == "Relations deleted successfully"
        await ok(s, "create_relations", relations=[relation("Bo", "Shop", "guards")])
        deleted = await ok(s, "delete_entities", entityNames=["Shop", "Nobody"])
        assert deleted["message"] == "Entities deleted successfully"

        graph = await ok(s, "read_graph")
        assert graph["entities"] == [entity("Ann", "person", "likes hiking"), entity("Bo", "dog")]
        assert graph["relations"] == []
        result = await call(s, "read_graph")
        assert text_of(result).startswith(f"[memory: default → {memory}]\n")
    assert jsonl(memory) == [
        {"type": "entity", "name": "Ann", "entityType": "person", "observations": ["likes hiking"]},
        {"type": "entity", "name": "Bo", "entityType": "dog", "observations": []},
    ]


@pytest.mark.parametrize(
    ("tool", "arguments", "fragment"),
    [
        ("create_entities", {"entities": [{"name": "", "entityType": "t", "observations": []}]}, "entities[0].name"),
        ("create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": [1]}]}, "observations[0]"),
        ("create_entities", {"entities": "Ann"}, "entities"),
        ("create_relations", {"relations": [{"from": "a", "to": "  ", "relationType": "r"}]}, "relations[0].to"),
        ("add_observations", {"observations": [{"entityName": "a"}]}, "contents"),
        ("search_nodes", {}, "query"),
    ],
)
async def test_bad_input_is_a_clear_error_and_changes_nothing(env, memory, tool, arguments, fragment):
    memory.write_text('{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    before = memory.read_bytes()
    async with connect(env) as s:
        result = await s.call_tool(tool, arguments)
    assert result.is_error
    assert fragment in text_of(result)
    assert memory.read_bytes() == before


async def test_unparsable_lines_are_reported_and_survive(env, memory):
    memory.write_text(
        '{"type":"entity","name":"a","entityType":"t","observations":[]}\n'
        "{broken\n"
        '{"type":"note","text":"hello"}\n'
        '{"type":"entity","name":"b","entityType":"t","observations":["x"]}'
    )
    async with connect(env) as s:
        first = await ok(s, "read_graph")
        assert [e["name"] for e in first["entities"]] == ["a", "b"]
        [warning] = first["warnings"]
        assert "Skipped 2 lines" in warning and "line 2" in warning and "line 3" in warning and str(memory) in warning
        await ok(s, "add_observations", observations=[{"entityName": "a", "contents": ["y"]}])
        await ok(s, "create_entities", entities=[entity("c")])
        await ok(s, "delete_entities", entityNames=["b"])
    lines = memory.read_text().splitlines()
    assert lines[1:3] == ["{broken", '{"type":"note","text":"hello"}']
    assert [json.loads(line)["name"] for line in (lines[0], lines[3])] == ["a", "c"]


async def test_a_file_saved_on_windows_is_read_whole_and_kept_byte_for_byte(env, memory):
    """An official memory.jsonl edited in Notepad or PowerShell 5: a byte-order mark, CRLF line ends. Every record
    is read; a write to one record leaves every other line, the BOM on line 1 included, byte for byte; every line
    written (rewritten, appended, by this server or by a second one following the file) ends in CRLF too."""
    first = b'\xef\xbb\xbf{"type":"entity","name":"Ann","entityType":"person","observations":["likes tea"]}\r\n'
    rest = (
        b'{"type":"entity","name":"Bo","entityType":"person","observations":[]}\r\n'
        b'{"type":"relation","from":"Ann","to":"Bo","relationType":"knows"}\r\n'
    )
    memory.write_bytes(first + rest)
    async with connect(env) as s, connect(env) as second:
        graph = await ok(s, "read_graph")
        assert [e["name"] for e in graph["entities"]] == ["Ann", "Bo"] and "warnings" not in graph
        assert (await ok(s, "search_nodes", query="tea", mode="keyword"))["entities"][0]["name"] == "Ann"
        await ok(s, "add_observations", observations=[{"entityName": "Bo", "contents": ["x"]}])
        assert memory.read_bytes().startswith(first) and memory.read_bytes().endswith(rest[-67:])
        await ok(s, "create_entities", entities=[entity("Cy")])
        assert await ok(second, "read_graph") == await ok(s, "read_graph")
        await ok(second, "create_relations", relations=[relation("Cy", "Bo", "knows")])
        await ok(second, "delete_observations", deletions=[{"entityName": "Bo", "observations": ["x"]}])
        assert await ok(s, "read_graph") == await ok(second, "read_graph")
        await ok(s, "add_observations", observations=[{"entityName": "Ann", "contents": ["y"]}])
    data = memory.read_bytes()
    assert json.loads(data.splitlines()[0])["observations"] == ["likes tea", "y"]
    assert data.count(b"\n") == data.count(b"\r\n") == 5


async def test_nothing_but_protocol_on_stdout_and_logs_on_stderr(memory):
    request = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
        '"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}\n'
        '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add_observations",'
        '"arguments":{"observations":[{"entityName":"ghost","contents":["x"]}]}}}\n'
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_entities","arguments":{"entities":7}}}\n'
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "--log-level", "debug"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(MEMORY_FILE_PATH=memory),
    )
    server.stdin.write(request)
    server.stdin.flush()
    replies = [json.loads(server.stdout.readline()) for _ in range(3)]  # every line must be JSON-RPC
    rest, errors = server.communicate(timeout=30)  # closes stdin: the server stops
    assert rest == ""
    assert sorted(r.get("id") for r in replies) == [1, 2, 3]
    assert all(r["jsonrpc"] == "2.0" for r in replies)
    assert all(r["result"]["isError"] for r in replies if r["id"] in (2, 3))
    assert "Memory server" in errors


async def test_two_processes_creating_concurrently_lose_nothing(memory):
    env = server_env(MEMORY_FILE_PATH=memory)
    counts = {}

    async def client(tag: str) -> None:
        async with connect(env) as s:
            for i in range(100):
                await ok(s, "create_entities", entities=[entity(f"{tag}-{i}", "t", f"made by {tag}")])
            counts[tag] = len((await ok(s, "read_graph"))["entities"])

    async with anyio.create_task_group() as group:
        group.start_soon(client, "one")
        group.start_soon(client, "two")
    names = [line["name"] for line in jsonl(memory)]
    assert len(names) == 200 and len(set(names)) == 200
    assert max(counts.values()) == 200


async def test_memory_path_relative_to_the_current_folder_and_legacy_migration(tmp_path, user_folders):
    work = tmp_path / "work"
    work.mkdir()
    async with connect(server_env(MEMORY_FILE_PATH="rel/mem.jsonl"), cwd=work) as s:
        await ok(s, "create_entities", entities=[entity("a")])
    assert (work / "rel" / "mem.jsonl").exists()

    data = tmp_path / "data" / "mcp-memory-contexts"
    data.mkdir(parents=True)
    (data / "memory.json").write_text('{"type":"entity","name":"old","entityType":"t","observations":[]}\n')
    async with connect(server_env()) as s:
        graph = await ok(s, "read_graph")
    assert [e["name"] for e in graph["entities"]] == ["old"]
    assert (data / "memory.jsonl").exists() and not (data / "memory.json").exists()


async def test_an_unwritable_path_is_named_in_the_error(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    async with connect(server_env(MEMORY_FILE_PATH=blocker / "memory.jsonl")) as s:
        message = await failure(s, "create_entities", entities=[entity("a")])
    assert str(blocker) in message and ("Not a directory" in message or "File exists" in message)
    assert os.path.isfile(blocker)


async def test_create_entities_says_which_names_it_did_not_create(env, memory):
    """The official server answers [] for an entity that already exists and drops the observations sent with it;
    a model reading only '[]' believes they were saved. The text says what was not created and what to call."""
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Ann", "person", "likes tea")])
        result = await call(s, "create_entities", entities=[entity("Ann", "human", "moved to Oslo"), entity("Bo")])
        twice = await call(s, "create_entities", entities=[entity("Cy", "t", "one"), entity("Cy", "t", "two")])
        fresh = await call(s, "create_entities", entities=[entity("Di")])
    assert result.structured_content["entities"] == [entity("Bo")]  # the official answer, unchanged
    text = text_of(result)
    assert "Already in memory, so not created (nothing sent for them was saved): Ann." in text
    assert "add_observations" in text
    assert "Already in memory" in text_of(twice) and "Cy." in text_of(twice).splitlines()[1]
    assert "Already in memory" not in text_of(fresh)
    assert [r.get("observations") for r in jsonl(memory)] == [["likes tea"], [], ["one"], []]


async def test_open_nodes_names_what_it_did_not_find_and_what_was_meant(env, memory):
    """An agent that opens "maya" or "Maya" for "Maya Okafor" gets the official empty answer; the text says which
    names were not found and the names it may have meant, so the next call can be right."""
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Maya Okafor", "person", "lives in Lisbon"), entity("Luna")])
        result = await call(s, "open_nodes", names=["luna", "Maya", "Ghost", "Luna"])
        found = await call(s, "open_nodes", names=["Luna"])
    assert [e["name"] for e in result.structured_content["entities"]] == ["Luna"]  # the official answer
    text = text_of(result)
    assert "Not found: 'luna' (did you mean 'Luna'?), 'Maya' (did you mean 'Maya Okafor'?), 'Ghost'." in text
    assert "Not found" not in text_of(found)


async def test_an_entity_not_found_says_what_was_meant_and_how_to_go_on(env, memory):
    """The official text stays ("Entity with name X not found"); what follows it names the entity the agent
    probably meant, or says to create it first."""
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Maya Okafor", "person", "lives in Lisbon"), entity("Luna")])
        before = memory.read_bytes()
        cased = await failure(s, "add_observations", observations=[{"entityName": "luna", "contents": ["grey"]}])
        ghost = await failure(s, "create_relations", relations=[relation("Maya", "Ghost", "knows")])
    assert memory.read_bytes() == before
    assert "Entity with name luna not found. Did you mean 'Luna'?" in cased and "Nothing was changed." in cased
    assert "Entity with name Maya not found. Did you mean 'Maya Okafor'?" in ghost and "create_entities" in ghost


async def test_a_deletion_that_matched_nothing_says_what_was_not_there(env, memory):
    """The official server answers "deleted successfully" whatever matched; an agent that misquotes the fact it
    replaces ("Lives in Bristol" for "Lives in Bristol, Redland") believes the old fact gone while it stays and
    contradicts the new one. The official answer stays; the text first names what was not there."""
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Ann", "person", "Lives in Bristol, Redland", "likes tea")])
        await ok(s, "create_entities", entities=[entity("Siobhán Ní Bhriain")])
        await ok(s, "create_relations", relations=[relation("Ann", "Siobhán Ní Bhriain", "knows")])
        before = memory.read_bytes()
        observations = await call(
            s,
            "delete_observations",
            deletions=[
                {"entityName": "Ann", "observations": ["Lives in Bristol", "likes tea"]},
                {"entityName": "ann", "observations": ["x"]},
            ],
        )
        relations = await call(s, "delete_relations", relations=[relation("Ann", "Siobhan", "knows")])
        entities = await call(s, "delete_entities", entityNames=["Siobhan Ni Bhriain", "Ghost"])
        done = await call(s, "delete_entities", entityNames=["Siobhán Ní Bhriain"])
    official = {"success": True, "message": "Observations deleted successfully"}
    assert observations.structured_content == {**official, "context": observations.structured_content["context"]}
    text = text_of(observations)
    assert "Not found, so nothing was deleted from them: 'ann' (did you mean 'Ann'?)." in text
    assert "Not among the observations of 'Ann', so not deleted: 'Lives in Bristol'." in text
    assert 'open_nodes(names=["Ann"])' in text and "likes tea" not in text
    assert text.endswith("\nObservations deleted successfully")
    assert "Not found, so not deleted: Ann -knows-> Siobhan." in text_of(relations)
    assert text_of(relations).endswith("\nRelations deleted successfully")
    assert (
        "Not found, so not deleted: 'Siobhan Ni Bhriain' (did you mean 'Siobhán Ní Bhriain'?), 'Ghost'."
        in text_of(entities)
    )
    assert "Not found" not in text_of(done) and text_of(done).endswith("]\nEntities deleted successfully")
    assert before != memory.read_bytes()  # 'likes tea' went, and Siobhán with her relation
    assert jsonl(memory) == [
        {"type": "entity", "name": "Ann", "entityType": "person", "observations": ["Lives in Bristol, Redland"]}
    ]


@pytest.mark.parametrize("query", ["", "   "])
async def test_an_empty_query_says_so_and_keyword_mode_still_matches_everything(env, query):
    """search_nodes(query="") in hybrid or semantic mode said "nothing relevant found ... try other words"; it
    says the query is empty and what to pass. Keyword mode is the official server's: "" is in every entity."""
    async with connect(env) as s:
        await ok(s, "create_entities", entities=[entity("Ann", "person", "pays rent"), entity("Bo")])
        ranked = [await call(s, "search_nodes", query=query, mode=mode) for mode in ("hybrid", "semantic")]
        every = await ok(s, "search_nodes", query="", mode="keyword")
    for result in ranked:
        assert not result.is_error and result.structured_content["matches"] == []
        assert "the query is empty: pass the words to look for as query" in text_of(result)
        assert "nothing relevant" not in text_of(result)
    assert [e["name"] for e in every["entities"]] == ["Ann", "Bo"]
