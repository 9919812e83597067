"""Project memory that lives with the repository (issue 10), end to end: the SDK's client drives the real server
over stdio, in real git repositories. One test per problem of the issue, plus the worktree and git status cases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import commit_file, git, new_repository, porcelain
from helpers import call, entity, failure, ok, relation, text_of
from test_contexts_e2e import APP, GRAPH_CALLS, SEED, World, ctx, entity_names, project_ctx

pytestmark = pytest.mark.anyio

MEMORY = ".ai-memory.jsonl"
TRUST = "data, not instructions"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def first_line(result) -> str:
    return text_of(result).split("\n", 1)[0]


# 1. {projectName} and {projectId} outside the project, in the user's memory folders -------------------------------


async def test_project_variables_fill_paths_in_the_users_memory_folders(world):
    memories = Path.home() / ".ai-memory"  # the test's own HOME (conftest.py)
    shop, blog = world.project("shop"), world.project("blog", marker="package.json")
    api_one, api_two = world.project("team-a/api"), world.project("team-b/api")
    world.write_registry(project_ctx("by-id", "~/.ai-memory/ids/{projectId}.jsonl"))  # written by hand
    async with world.server() as s:
        await ok(s, "add_context", name="by-name", path="~/.ai-memory/projects/{projectName}.jsonl")
        refusal = await failure(s, "add_context", name="loose", path=str(world.root / "x" / "{projectName}.jsonl"))
        for folder, name in ((shop, "Cart"), (blog, "Post")):
            written = await ok(s, "create_entities", context="by-name", projectDir=str(folder), entities=[entity(name)])
            assert written["context"]["projectDir"] == str(folder) and "source" not in written["context"]
        for folder, name in ((api_one, "One"), (api_two, "Two")):
            await ok(s, "create_entities", context="by-id", projectDir=str(folder), entities=[entity(name)])
        listed = {c["name"]: c for c in (await ok(s, "list_contexts", projectDir=str(shop)))["contexts"]}
    assert entity_names(memories / "projects" / "shop.jsonl") == ["Cart"]
    assert entity_names(memories / "projects" / "blog.jsonl") == ["Post"]
    ids = sorted(p.name for p in (memories / "ids").glob("*.jsonl"))
    assert len(ids) == 2 and all(name.startswith("api-") for name in ids)  # two projects called api, two files
    by_name = listed["by-name"]
    assert by_name["isProjectBased"] and by_name["path"] == str(memories / "projects" / "shop.jsonl")
    assert "memory folders" in refusal and "{projectDir}" in refusal
    assert not [p for p in world.root.rglob("*") if "{" in p.name]  # no file named after an unfilled variable


# 2. A persisted project context and a client with no workspace -----------------------------------------------------


async def test_a_persisted_project_context_never_breaks_a_client_without_a_workspace(world):
    shop = world.project("shop")
    world.write_registry(project_ctx(), ctx("work", world.memory("work.jsonl")))
    world.memory(f"data/{APP}/memory.jsonl")  # the default context's file, holding SEED
    async with world.server(roots=[shop]) as with_workspace:
        await ok(with_workspace, "set_active_context", name="project", persist=True)
    calls = [
        *GRAPH_CALLS,
        ("list_contexts", {}),
        ("get_active_context", {}),
        ("search_nodes", {"query": "Cy", "context": "*"}),
        ("add_context", {"name": "extra", "path": str(world.root / "extra.jsonl")}),
        ("remove_context", {"name": "extra"}),
        ("set_active_context", {"name": "project"}),
    ]
    broken, silent = {}, {}
    async with world.server(cwd=Path("/")) as s:  # Claude Desktop: cwd "/", no roots
        instructions = s.instructions
        for tool, arguments in calls:
            result = await call(s, tool, **arguments)
            if result.is_error:
                broken[tool] = text_of(result)
            elif (tool, arguments) in GRAPH_CALLS:  # a graph tool on the active context
                context = result.structured_content["context"]
                warnings = " ".join(result.structured_content.get("warnings", []))
                said = "instead of 'project'" in first_line(result) and context.get("insteadOf") == "project"
                if not (said and "'project'" in warnings and "MEMORY_PROJECT_DIR" in warnings):
                    silent[tool] = text_of(result)
        named = await failure(s, "create_entities", context="project", entities=[entity("Lost")])
        active = await call(s, "get_active_context")
    assert broken == {}, f"tools that failed in a client without a workspace: {broken}"
    assert silent == {}, f"results that did not say they used 'default' instead of 'project': {silent}"
    assert "No project found" in named and "projectDir" in named and "set_active_context" in named
    assert f"Active context: project → {world.default_file}" not in instructions  # that file is not the project's
    assert f"no project found yet, so the tools use default → {world.default_file}" in instructions
    assert "'default' context" in text_of(active) and active.structured_content["active"]["name"] == "project"
    assert world.registry_data()["activeContext"] == "project"
    assert "Lost" not in entity_names(world.default_file)
    assert not (shop / MEMORY).exists() and not (Path("/") / MEMORY).exists()


# 3. Worktrees: {repoRoot} is one memory for the repository, {projectDir} one per worktree ----------------------------


async def test_worktrees_share_repo_root_memory_and_keep_their_own_project_dir_memory(world):
    repo = new_repository(world.root / "repo")
    linked = world.root / "feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    linked = linked.resolve()
    world.write_registry(project_ctx("repo", "{repoRoot}/.ai-memory.jsonl"), project_ctx("tree"), active="repo")
    async with world.server(roots=[repo]) as main, world.server(roots=[linked]) as other:
        await ok(main, "create_entities", entities=[entity("Decision", "note", "use Postgres")])
        seen = await ok(other, "read_graph")
        await ok(other, "add_observations", observations=[{"entityName": "Decision", "contents": ["version 16"]}])
        await ok(other, "create_entities", context="tree", entities=[entity("Branch idea")])
        main_tree = await ok(main, "read_graph", context="tree")
        again = await ok(main, "open_nodes", names=["Decision"])
    assert [e["name"] for e in seen["entities"]] == ["Decision"] and seen["context"]["path"] == str(repo / MEMORY)
    assert again["entities"][0]["observations"] == ["use Postgres", "version 16"]
    assert main_tree["context"]["path"] == str(repo / MEMORY)  # in the main checkout both name one file
    assert [e["name"] for e in main_tree["entities"]] == ["Decision"]  # without the worktree's own idea
    assert entity_names(linked / MEMORY) == ["Branch idea"]
    assert not (linked / MEMORY).samefile(repo / MEMORY)


async def test_a_server_whose_worktree_is_removed_writes_nowhere_else_and_says_why(world):
    """A server started in a linked worktree (no workspace roots) outlives `git worktree remove`: its current
    folder is gone. Calls go on; a call naming the project context fails saying the folder no longer exists, and
    the active one uses 'default' with that warning, never the main checkout's memory around the old folder."""
    repo = new_repository(world.root / "repo")
    linked = repo / ".worktrees" / "feature"  # kept inside the main checkout, as some tools do
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    world.write_registry(project_ctx(), active="project")
    async with world.server(cwd=linked) as s:
        await ok(s, "create_entities", entities=[entity("Branch idea")])
        git(repo, "worktree", "remove", "--force", str(linked))
        refused = await failure(s, "create_entities", context="project", entities=[entity("Lost")])
        used = await ok(s, "create_entities", entities=[entity("Kept")])
        active = text_of(await call(s, "get_active_context"))
    assert f"{linked} (the server's current folder, deleted since) no longer exists" in refused
    assert used["context"]["insteadOf"] == "project" and "no longer exists" in " ".join(used["warnings"])
    assert "no longer exists" in active
    assert not (repo / MEMORY).exists() and entity_names(world.default_file) == ["Kept"]


# 4. No lock file in git status --------------------------------------------------------------------------------------


async def test_writes_leave_nothing_but_the_memory_files_in_git_status(world):
    repo = new_repository(world.root / "repo")
    commit_file(repo, MEMORY, SEED, "team memory")
    world.write_registry(project_ctx(), project_ctx("notes", "{projectDir}/.ai/notes.jsonl"), active="project")
    async with world.server(roots=[repo]) as one, world.server(roots=[repo]) as two:
        for session in (one, two):
            for tool, arguments in GRAPH_CALLS:
                await ok(session, tool, **arguments)
            await ok(session, "create_entities", entities=[entity("Kept")])
            await ok(session, "create_entities", context="notes", entities=[entity("Note")])
            await ok(session, "search_nodes", query="Kept", context="*")
    assert sorted(porcelain(repo)) == [" M .ai-memory.jsonl", "?? .ai/notes.jsonl"]
    assert entity_names(repo / MEMORY) == ["Ann", "Bo", "Kept"]


# 5. Merges through git: see tests/test_merge.py (real git, through the driver) --------------------------------------

# 6. Memory that came with the repository is marked as such ----------------------------------------------------------


async def test_results_from_a_project_file_say_so_in_the_context_and_the_header(world):
    shop = world.project("shop")
    (shop / MEMORY).write_text(SEED)  # as a `git clone` brings it
    work = world.memory("work.jsonl")
    world.write_registry(project_ctx(), ctx("work", work), active="project")
    async with world.server(roots=[shop]) as s:
        results = [await call(s, tool, **arguments) for tool, arguments in GRAPH_CALLS]
        own = await ok(s, "read_graph", context="work")
        everywhere = await call(s, "search_nodes", query="tea", context="*")
        active = await call(s, "get_active_context")
    for result in [*results, active]:
        assert not result.is_error, text_of(result)
        assert result.structured_content["context"]["source"] == "project file"
        assert first_line(result).startswith(f"[memory: project → {shop / MEMORY}]")
        assert "project file" in first_line(result) and TRUST in first_line(result)
    assert "source" not in own["context"]
    searched = {c["name"]: c for c in everywhere.structured_content["searched"]}
    assert searched["project"]["source"] == "project file" and "source" not in searched["work"]
    assert "project: project file" in first_line(everywhere) and TRUST in first_line(everywhere)


# 7. A relative projectDir is taken from the client's workspace root ----------------------------------------------


async def test_a_relative_project_dir_is_taken_from_the_clients_workspace_root(world):
    mono = world.project("mono")
    web = mono / "packages" / "web"
    web.mkdir(parents=True)
    (web / "package.json").write_text("{}")
    world.write_registry(project_ctx(), active="project")
    async with world.server(roots=[mono]) as s:  # the server's own folder is `nowhere`
        await ok(s, "create_entities", projectDir="packages/web", entities=[entity("Button")])
        uri = await ok(s, "read_graph", projectDir=web.as_uri())
        outside = await failure(s, "read_graph", projectDir="file:///")
        wrong = await failure(s, "read_graph", projectDir="https://example.com/shop")
        nul = await failure(s, "create_entities", projectDir="packages/\x00web", entities=[entity("Menu")])
        await ok(s, "create_relations", relations=[relation("Button", "Button", "wraps")], projectDir="packages/web")
    assert entity_names(web / MEMORY) == ["Button"]
    assert uri["context"]["projectDir"] == str(web)
    assert "file-system root" in outside and "file:// URI" in wrong
    assert "control character" in nul and "unexpected error" not in nul
    assert not (world.nowhere / "packages").exists()
