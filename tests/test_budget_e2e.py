"""The result budget over stdio: with 2,000 and 20,000 entities no tool result and no resource read exceeds it,
paging gives everything once, budget 0 is the official behaviour, and the server says how to use memory."""

from __future__ import annotations

import base64
import json

import pytest
from helpers import connect, entity, relation, server_env, text_of
from mcp_types import PaginatedRequestParams
from sample_graphs import big_graph_text

from memory_server import cli
from memory_server.budget import text_tokens

pytestmark = pytest.mark.anyio

BUDGET = 20_000  # the default


def assert_within(result, what: str, budget: int = BUDGET) -> None:
    text = text_of(result)
    assert len(text) / 4 <= budget and text_tokens(text) <= budget, f"{what}: text of {len(text):,} characters"
    if result.structured_content is not None:
        size = len(json.dumps(result.structured_content))
        assert size / 4 <= budget, f"{what}: structured content of {size:,} characters"


async def checked(session, tool: str, **arguments):
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert_within(result, f"{tool}({', '.join(arguments)})")
    return result.structured_content


@pytest.mark.parametrize("size", [2_000, 20_000])
async def test_no_result_exceeds_the_budget_at_any_size(tmp_path, size):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(size), encoding="utf-8")
    other = tmp_path / "other.jsonl"
    other.write_text(big_graph_text(size // 2, seed=3), encoding="utf-8")
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "contexts.json").write_text(
        json.dumps({"contexts": [{"name": "default", "path": str(memory)}, {"name": "other", "path": str(other)}]})
    )
    model = {} if size <= 2_000 else {"MEMORY_EMBEDDING_MODEL": "none"}  # embedding 20,000 entities is slow
    env = server_env(MEMORY_CONTEXTS_DIR=tmp_path / "registry", **model)
    async with connect(env) as s:
        first = await checked(s, "read_graph")
        assert first["overview"]["entities"] == size and first["nextCursor"]
        await checked(s, "read_graph", cursor=first["nextCursor"])
        for arguments in ({"detail": "names"}, {"detail": "summary"}, {"entityType": "person"}, {"limit": 10_000}):
            page = await checked(s, "read_graph", **arguments)
            assert page["total"]["entities"] > len(page["entities"]) > 0
        await checked(s, "read_graph", context="other")
        found = await checked(s, "search_nodes", query="coffee", mode="keyword")
        assert found["total"]["entities"] > len(found["entities"])
        await checked(s, "search_nodes", query="coffee", mode="keyword", cursor=found["nextCursor"])
        await checked(s, "search_nodes", query="coffee in Lisbon", limit=5_000)
        await checked(s, "search_nodes", query="coffee", mode="keyword", context="*")
        await checked(s, "search_nodes", query="hiking chess")
        every = [f"E{i}" for i in range(size)]
        opened = await checked(s, "open_nodes", names=every)
        assert opened["total"]["entities"] == size and opened["nextCursor"]
        await checked(s, "open_nodes", names=every, cursor=opened["nextCursor"])
        await checked(s, "open_nodes", names=["E1", "E2"], depth=2)

        batch = [entity(f"new {i}", "t", f"note {i} " * 30) for i in range(size // 4)]
        created = await checked(s, "create_entities", entities=batch)
        assert created["total"] == {"entities": size // 4} and 0 < len(created["entities"]) < size // 4
        links = [relation(f"new {i}", f"E{i}", "follows") for i in range(size // 4)]
        assert (await checked(s, "create_relations", relations=links))["total"] == {"relations": size // 4}
        additions = [{"entityName": f"E{i}", "contents": [f"added {i} " * 20]} for i in range(size // 2)]
        added = await checked(s, "add_observations", observations=additions)
        assert added["total"] == {"entities": size // 2, "observations": size // 2}
        deletions = [{"entityName": a["entityName"], "observations": a["contents"]} for a in additions]
        await checked(s, "delete_observations", deletions=deletions)
        await checked(s, "delete_relations", relations=links)
        await checked(s, "delete_entities", entityNames=[e["name"] for e in batch])
        for tool in ("list_contexts", "get_active_context"):
            await checked(s, tool)
        await checked(s, "set_active_context", name="other")
        await checked(s, "read_graph")
        await checked(s, "set_active_context", name="default")

        for uri in ("memory://knowledge-graph", "memory://contexts/other", "memory://contexts"):
            [content] = (await s.read_resource(uri)).contents
            assert text_tokens(content.text) <= BUDGET, uri
        graph = json.loads((await s.read_resource("memory://knowledge-graph")).contents[0].text)
        assert graph["overview"]["entities"] == size and "read_graph" in graph["note"] and graph["nextCursor"]


async def test_paging_over_stdio_gives_each_entity_and_relation_once(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(2_000), encoding="utf-8")
    lines = [json.loads(line) for line in memory.read_text(encoding="utf-8").splitlines()]
    env = server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none")
    async with connect(env) as s:
        entities, relations, cursor = [], [], None
        while True:
            page = await checked(s, "read_graph", **({"cursor": cursor} if cursor else {}))
            entities += [e["name"] for e in page["entities"]]
            relations += [(r["from"], r["to"], r["relationType"]) for r in page["relations"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert entities == [line["name"] for line in lines if line["type"] == "entity"]
        expected = [(line["from"], line["to"], line["relationType"]) for line in lines if line["type"] == "relation"]
        assert sorted(relations) == sorted(set(expected))

        first = await checked(s, "read_graph", limit=5)
        await checked(s, "create_entities", entities=[entity("late arrival")])
        stale = await s.call_tool("read_graph", {"cursor": first["nextCursor"]})
        assert stale.is_error and "without cursor to start at the first page" in text_of(stale)
        bad = await s.call_tool("read_graph", {"cursor": "not-a-cursor"})
        assert bad.is_error and "not one this server gave out" in text_of(bad)


async def test_budget_zero_is_the_official_behaviour(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(2_000), encoding="utf-8")
    lines = [json.loads(line) for line in memory.read_text(encoding="utf-8").splitlines()]
    env = server_env(MEMORY_FILE_PATH=memory, MEMORY_MAX_RESULT_TOKENS="0", MEMORY_EMBEDDING_MODEL="none")
    async with connect(env) as s:
        result = await s.call_tool("read_graph", {})
        graph = result.structured_content
        assert set(graph) == {"entities", "relations", "context"}
        assert graph["entities"] == [
            {k: line[k] for k in ("name", "entityType", "observations")} for line in lines if line["type"] == "entity"
        ]
        assert len(graph["relations"]) == len({(r["from"], r["to"], r["relationType"]) for r in lines[2_000:]})
        header, body = text_of(result).split("\n", 1)
        assert header == f"[memory: default → {memory}]"
        assert json.loads(body) == {"entities": graph["entities"], "relations": graph["relations"]}


async def test_small_results_are_unchanged_and_the_server_says_how_to_use_memory(tmp_path):
    memory = tmp_path / "memory.jsonl"
    work = tmp_path / "work.jsonl"
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "contexts.json").write_text(
        json.dumps(
            {
                "contexts": [
                    {"name": "default", "path": str(memory)},
                    {"name": "work", "path": str(work), "description": "Work-related memories"},
                ]
            }
        )
    )
    async with connect(server_env(MEMORY_CONTEXTS_DIR=tmp_path / "registry")) as s:
        instructions = s.instructions
        created = await checked(s, "create_entities", entities=[entity("Ann", "person", "likes tea"), entity("Bo")])
        await checked(s, "create_relations", relations=[relation("Ann", "Bo", "knows")])
        graph = await checked(s, "read_graph")
        opened = await checked(s, "open_nodes", names=["Ann"])
        result = await s.call_tool("read_graph", {})
    assert set(created) == {"entities", "context"}
    assert set(graph) == set(opened) == {"entities", "relations", "context"}
    assert text_of(result) == (
        f"[memory: default → {memory}]\n"
        '{\n"entities": [\n{"name":"Ann","entityType":"person","observations":["likes tea"]},\n'
        '{"name":"Bo","entityType":"person","observations":[]}\n],\n'
        '"relations": [\n{"from":"Ann","to":"Bo","relationType":"knows"}\n]\n}'
    )
    assert f"Active context: default → {memory}" in instructions
    assert "work (Work-related memories)" in instructions
    assert "search_nodes" in instructions and "open_nodes" in instructions and "nextCursor" in instructions
    assert "not instructions" in instructions
    assert len(instructions) < 1_000


def test_the_budget_option_and_its_environment_variable(monkeypatch):
    assert cli.parse_options([]).max_result_tokens == BUDGET
    assert cli.parse_options(["--max-result-tokens", "0"]).max_result_tokens == 0
    monkeypatch.setenv("MEMORY_MAX_RESULT_TOKENS", "5000")
    assert cli.parse_options([]).max_result_tokens == 5000
    assert cli.parse_options(["--max-result-tokens", "1500"]).max_result_tokens == 1500
    for wrong in ("-1", "lots", "100"):  # a result needs about a thousand tokens around its content
        with pytest.raises(SystemExit):
            cli.parse_options(["--max-result-tokens", wrong])


async def test_a_small_budget_pages_small(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(200), encoding="utf-8")
    env = server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none")
    async with connect(env, args=["--max-result-tokens", "1500"]) as s:
        page = await checked(s, "read_graph")
        assert_within(await s.call_tool("read_graph", {}), "read_graph", 1_500)
        assert page["nextCursor"] and page["total"]["entities"] == 200
        opened = await s.call_tool("open_nodes", {"names": [f"E{i}" for i in range(200)], "depth": 1})
        assert_within(opened, "open_nodes", 1_500)


async def test_results_driven_by_the_registry_stay_within_the_budget(tmp_path):
    """A thousand contexts, two thousand broken entries, a description of half a megabyte, twenty thousand markers."""
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(50), encoding="utf-8")
    entries = [{"name": "default", "path": str(memory)}]
    entries += [
        {"name": f"c{i:04d}", "path": str(tmp_path / f"c{i}.jsonl"), "description": f"Client project {i} " * 20}
        for i in range(1_000)
    ]
    entries += [{"name": f"bad{i}", "path": 5} for i in range(2_000)]
    entries.append({"name": "big", "path": str(tmp_path / "big.jsonl"), "description": "d" * 500_000})
    # maxDepth 0: the search looks in tmp_path alone, never in /tmp, where a folder such as /tmp/m5 may exist.
    markers = {"markers": [f"m{i}" for i in range(20_000)], "maxDepth": 0}
    entries.append({"name": "mk", "path": "{projectDir}/.ai-memory.jsonl", "projectDetectionRules": markers})
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "contexts.json").write_text(json.dumps({"contexts": entries}))
    env = server_env(MEMORY_CONTEXTS_DIR=tmp_path / "registry", MEMORY_EMBEDDING_MODEL="none")
    async with connect(env, cwd=tmp_path) as s:
        assert len(s.instructions) < 2_000 and "and 992 more (list_contexts)" in s.instructions
        graph = await checked(s, "read_graph")
        assert len(graph["warnings"]) == 4 and "And 1,997 more problems" in graph["warnings"][-1]
        names, cursor = [], None
        while True:
            page = await checked(s, "list_contexts", **({"cursor": cursor} if cursor else {}))
            names += [c["name"] for c in page["contexts"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert len(names) == len(set(names)) == 1_003 and page["total"] == {"contexts": 1_003}
        big = (await checked(s, "list_contexts", name="big"))["contexts"][0]
        assert big["description"].startswith("d" * 10_000) and "500,000 characters in all" in big["description"]
        await checked(s, "get_active_context")
        await checked(s, "search_nodes", query="coffee", context="*")
        refused = await s.call_tool("add_context", {"name": "more", "path": str(tmp_path / "more.jsonl")})
        assert refused.is_error and "has problems" in text_of(refused) and "1,997 more" in text_of(refused)
        assert_within(refused, "add_context to a registry with 2,000 problems")
        missing = await s.call_tool("read_graph", {"context": "mk"})
        assert missing.is_error and "and 19,990 more" in text_of(missing)
        assert_within(missing, "read_graph of a context that finds no project")
        for uri in ("memory://contexts", "memory://knowledge-graph"):
            [content] = (await s.read_resource(uri)).contents
            assert text_tokens(content.text) <= BUDGET, uri
        listed, cursor = [], None
        while True:
            resources = await s.list_resources(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            assert len(json.dumps([r.model_dump(mode="json") for r in resources.resources])) / 4 <= BUDGET
            listed += [str(r.uri) for r in resources.resources]
            cursor = resources.next_cursor
            if cursor is None:
                break
        assert len(listed) == len(set(listed)) == 2 + 1_003
    # A huge name in a call is quoted by its start and its length.
    for tool, arguments in [
        ("add_observations", {"observations": [{"entityName": "N" * 500_000, "contents": ["x"]}]}),
        ("create_relations", {"relations": [relation("A" * 500_000, "E1", "r")]}),
        ("read_graph", {"entityType": "T" * 1_000_000}),
    ]:
        async with connect(server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none")) as s:
            result = await s.call_tool(tool, arguments)
            assert len(text_of(result)) < 1_500, (tool, text_of(result)[:300])


async def test_search_results_with_pasted_documents_keep_the_match_and_the_budget(tmp_path):
    vocabulary = ["the", "budget", "report", "quarterly", "revenue", "forecast", "meeting", "notes", "deadline"]
    document = " ".join(vocabulary[i * 7 % len(vocabulary)] for i in range(40_000))  # ~290,000 characters
    memory = tmp_path / "memory.jsonl"
    env = server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none")
    async with connect(env) as s:
        created = await checked(
            s,
            "create_entities",
            entities=[entity(f"Doc {i}", "document", document, f"short note {i} about espresso") for i in range(3)],
        )
        assert [e["name"] for e in created["entities"]] == ["Doc 0", "Doc 1", "Doc 2"]
        await checked(s, "add_observations", observations=[{"entityName": "Doc 0", "contents": [document + "!"]}])
        for mode in ("keyword", "hybrid"):
            for query in ("espresso", "quarterly"):
                found = await checked(s, "search_nodes", query=query, mode=mode)
                first = found["entities"][0]["observations"]
                for match in found["matches"]:
                    assert match["observation"] in first or match["observation"] is None
                    assert len(match["observation"] or "") < 80_000
                if query == "espresso":
                    assert first[0].startswith("short note") and len(first) >= 2  # the match first, the rest after
        await checked(s, "open_nodes", names=["Doc 0", "Doc 1"])
        await checked(s, "search_nodes", query="q" * 60_000, mode="keyword")


async def test_tampered_and_stale_cursors_get_one_clear_error_and_never_loop(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(big_graph_text(2_000), encoding="utf-8")
    async with connect(server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none")) as s:
        first = await checked(s, "read_graph")
        tool, arguments, state, offset, carry = json.loads(base64.urlsafe_b64decode(first["nextCursor"] + "=="))
        for tampered in (
            [tool, arguments, state, offset, {"limit": 0}],
            [tool, arguments, state, -1, carry],
            [tool, arguments, state, True, carry],
            [tool, arguments, state, offset, {"entityType": [[["deep"]]]}],
        ):
            cursor = base64.urlsafe_b64encode(json.dumps(tampered).encode()).decode().rstrip("=")
            result = await s.call_tool("read_graph", {"cursor": cursor})
            assert result.is_error and "is not one this server gave out" in text_of(result), tampered
            assert "without cursor to start again" in text_of(result)
        found = await checked(s, "search_nodes", query="coffee", mode="keyword")
        await checked(s, "create_entities", entities=[entity("Late coffee drinker")])
        stale = await s.call_tool("search_nodes", {"query": "coffee", "mode": "keyword", "cursor": found["nextCursor"]})
        assert stale.is_error and "what matches the query is not the same as for the first page" in text_of(stale)
