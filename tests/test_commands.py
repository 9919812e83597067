"""The commands for people, end to end: each runs as its own process (`python -m memory_server COMMAND`, and the
installed console script), on real files in the test's own folders (conftest.py points HOME and XDG there)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import resource
import select
import shutil
import stat
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock
import networkx
import pytest
from helpers import connect, jsonl, server_env

from memory_server.files import lock_path_for

APP = "mcp-memory-contexts"
FIXTURES = Path(__file__).with_name("fixtures")
# Lines written by the real official server (2026.8.31); see scripts/make_official_fixture.py.
OFFICIAL = FIXTURES / "official-memory.jsonl"

SEED = [
    {"type": "entity", "name": "Ann", "entityType": "person", "observations": ["pays rent on the 1st", "likes hiking"]},
    {"type": "entity", "name": "Shop", "entityType": "project", "observations": ["an online shop in Python"]},
    {"type": "entity", "name": "Bob", "entityType": "person", "observations": ["plays chess on Sundays"]},
    {"type": "relation", "from": "Ann", "to": "Shop", "relationType": "works on"},
    {"type": "relation", "from": "Bob", "to": "Ann", "relationType": "knows"},
]
BAD_LINES = [
    b"not json at all",
    b'{"type":"entity","name":"NoObservations","entityType":"thing"}',
    b'{"type":"spaceship","name":"x"}',
    b'{"type":"entity","name":"Latin1","entityType":"t","observations":["caf\xe9"]}',
    b'{"type":"entity","name":"Ann","entityType":"robot","observations":["second, different Ann"]}',
]


def cli(
    *args: str | Path, cwd: Path | None = None, timeout: float = 300, **env: str | Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_server", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=server_env(**env),
        timeout=timeout,  # a command that hangs fails its test instead of stopping the suite
    )


def write_memory(path: Path, records: list[dict[str, Any]], extra: list[bytes] = ()) -> Path:  # type: ignore[assignment]
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in records] + list(extra)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return write_memory(tmp_path / "memory.jsonl", SEED)


# ---- the server stays where it was -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("args", [["serve"], [], ["--read-only", "serve"], ["serve", "--read-only"]])
async def test_bare_command_and_serve_start_the_stdio_server_with_every_option(args, memory):
    async with connect(args=[*args, "--memory-path", str(memory)]) as session:
        result = await session.call_tool("open_nodes", {"names": ["Ann"]})
        assert not result.is_error and result.structured_content["entities"][0]["name"] == "Ann"
        created = await session.call_tool(
            "create_entities", {"entities": [{"name": "Cy", "entityType": "t", "observations": []}]}
        )
        assert created.is_error == ("--read-only" in args)


def test_the_console_script_runs_the_commands(memory):
    script = Path(sys.executable).with_name(APP)
    assert script.exists(), "install the package (pip install -e .) to get the console script"
    done = subprocess.run(
        [str(script), "show", "Ann", "--memory-path", str(memory)], capture_output=True, text=True, env=server_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Ann (person)"


def test_a_wrong_command_line_exits_2_and_says_why():
    done = cli("search")
    assert done.returncode == 2 and "QUERY" in done.stderr
    done = cli("serach", "rent")
    assert done.returncode == 2 and "invalid choice: 'serach'" in done.stderr


# ---- contexts ------------------------------------------------------------------------------------------------


def test_contexts_lists_files_counts_and_the_project_found_here(memory, tmp_path, user_folders):
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    write_memory(project / ".ai-memory.jsonl", SEED[:1])
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(
        json.dumps({"contexts": [{"name": "project", "path": "{projectDir}/.ai-memory.jsonl"}]}), encoding="utf-8"
    )
    done = cli("contexts", "--memory-path", memory, cwd=project / "src")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"* default → {memory} [3 entities, 2 relations, 4 observations] - Default memory"
    assert lines[1].startswith(f"  project → {project / '.ai-memory.jsonl'} [1 entity, 0 relations, 2 observations]")
    assert lines[2] == f"Project here: {project} (found by its .git, from {project / 'src'})"

    data = json.loads(cli("--memory-path", memory, "contexts", "--json", cwd=project / "src").stdout)
    assert [c["name"] for c in data["contexts"]] == ["default", "project"]
    assert data["project"]["root"] == str(project) and data["project"]["marker"] == ".git"

    nowhere = cli("contexts", cwd=tmp_path)
    assert nowhere.returncode == 0 and "No project here: none of" in nowhere.stdout
    home = Path(user_folders["HOME"])
    at_home = cli("contexts", cwd=home)
    assert at_home.stdout.splitlines()[-1] == (
        f"No project here: {home} (the current folder) is your home folder, which is never taken as a project; "
        "run this in a project folder, or give --project-dir DIR"
    )
    assert not (Path(user_folders["XDG_DATA_HOME"]) / APP / "memory.jsonl").exists()  # reading creates no memory


def test_counts_read_as_a_person_writes_them(tmp_path):
    """`1 entities, 0 relations, 1 observations` is how a program counts; people write `1 entity`."""
    one = write_memory(
        tmp_path / "one.jsonl",
        [SEED[0], SEED[0], {"type": "relation", "from": "Ann", "to": "Ghost", "relationType": "knows"}],
    )
    checked = cli("check", one).stdout.splitlines()
    assert checked[0] == f"{one}: 1 entity, 1 relation, 2 observations; no unusable lines."
    assert "  1 duplicate line is merged into the first (on the next write)." in checked
    assert "  1 relation names an entity the file does not have." in checked
    single = write_memory(tmp_path / "single.jsonl", [SEED[1]])
    assert "\n  1 entity, 0 relations, 1 observation\n" in cli("stats", "--memory-path", single).stdout
    assert f"{single} [1 entity, 0 relations, 1 observation]" in cli("contexts", "--memory-path", single).stdout
    exported = cli("export", "--format", "markdown", "--memory-path", single).stdout
    assert "\n1 entity, 0 relations, 1 observation.\n" in exported


def test_notes_name_the_commands_options_not_the_tools_arguments(memory, tmp_path, user_folders):
    """`contexts` and `search` passed on the server's notes, written for a model calling tools: "(the server's
    current folder)", "pass projectDir to this call", "mode 'keyword'". A person types options: each note says
    them (the server's own texts are unchanged: see test_project_memory_e2e.py)."""
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(
        json.dumps({"contexts": [{"name": "project", "path": "{projectDir}/.ai-memory.jsonl"}]}), encoding="utf-8"
    )
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    for_tools = ("server's", "projectDir", "set_active_context", "mode '", " context '*'", "query (")

    listed = cli("contexts", "--memory-path", memory, cwd=nowhere)
    unresolved = listed.stdout.splitlines()[1]
    assert unresolved.startswith(f"  project → (unresolved: no project marker in {nowhere} up to ")
    assert "(the current folder)" in unresolved
    given = cli("contexts", "--memory-path", memory, "--project-dir", nowhere, cwd=tmp_path).stdout
    assert "(--project-dir)" in given.splitlines()[1]

    searched = cli("search", "zzzz qqqq", "--context", "*", "--memory-path", memory, cwd=nowhere)
    assert searched.returncode == 1
    assert f"warning: not searched: project: no project marker in {nowhere} up to " in searched.stderr
    assert "(the current folder)" in searched.stderr
    assert "try other words, --mode keyword for an exact word or phrase" in searched.stdout
    assert "another --context, or --context '*' for every memory" in searched.stdout

    failed = cli("show", "Ann", "--context", "project", cwd=nowhere)
    assert failed.returncode == 3
    assert failed.stderr.startswith("error: No project found for context 'project': starting from ")
    assert "give --project-dir DIR, or choose another context with --context NAME." in failed.stderr

    empty = cli("search", "  ", "--memory-path", memory)
    assert empty.returncode == 1
    assert "the query is empty: give the words to look for (`export --format markdown` shows everything)" in (
        empty.stdout
    )
    for done in (listed, searched, failed, empty):
        assert not [words for words in for_tools if words in done.stdout + done.stderr], done.stdout + done.stderr


def test_an_active_project_context_without_project_says_once_that_default_was_used(memory, tmp_path, user_folders):
    """The server's results say when the active project context fell back to 'default'; each command says it too,
    once, on stderr, in the command's terms (its output on stdout stays what it was)."""
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    project = {"name": "project", "path": "{projectDir}/.ai-memory.jsonl", "projectDetectionRules": {"maxDepth": 0}}
    contexts = [{"name": "default", "path": str(memory)}, project]  # maxDepth 0: never a project found in /tmp
    registry.write_text(json.dumps({"activeContext": "project", "contexts": contexts}), encoding="utf-8")
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    said = (
        f"warning: this command used 'default' ({memory}): the active context 'project' found no project (no "
        f"project marker in {nowhere} (the current folder)). "
    )
    how = "For project memory, run the command in a project folder or give --project-dir DIR, or choose a context"
    for command in (["show", "Ann"], ["stats"], ["search", "rent"], ["export"], ["check"]):
        done = cli(*command, cwd=nowhere)
        assert done.returncode == 0 and done.stderr.count("found no project") == 1, (command, done.stderr)
        assert said in done.stderr and how in done.stderr, done.stderr
        assert not [words for words in ("projectDir", "set_active_context") if words in done.stderr], done.stderr
    assert cli("show", "Ann", cwd=nowhere).stdout == cli("show", "Ann", "--memory-path", memory, cwd=nowhere).stdout


# ---- search --------------------------------------------------------------------------------------------------


def test_search_finds_by_meaning_and_exits_1_when_nothing_matches(memory):
    done = cli("search", "who pays for housing", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"default → {memory}"
    assert lines[2].startswith("1. Ann (person)") and "pays rent" in lines[2]

    data = json.loads(cli("search", "rent", "--mode", "keyword", "--json", "--memory-path", memory).stdout)
    assert [m["entityName"] for m in data["matches"]] == ["Ann"]
    assert data["search"]["mode"] == "keyword" and data["more"] is False

    nothing = cli("search", "zzzz", "--mode", "keyword", "--memory-path", memory)
    assert nothing.returncode == 1 and nothing.stdout.splitlines()[1].startswith("0 matches")


def test_a_typed_memory_path_is_the_file_a_command_reads_whatever_context_is_active(memory, tmp_path, user_folders):
    """`search rent --memory-path ~/memory.jsonl` (the README's example) must read that file, also when contexts.json
    makes another context active (a server's set_active_context(persist=true))."""
    work = write_memory(tmp_path / "work.jsonl", [{"type": "entity", "name": "Desk", "entityType": "thing",
                                                   "observations": ["standing desk"]}])  # fmt: skip
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(json.dumps({"activeContext": "work", "contexts": [{"name": "work", "path": str(work)}]}))
    for args in (("show", "Ann", "--memory-path", memory), ("--memory-path", memory, "search", "rent")):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Ann" in done.stdout and f"default → {memory}" in done.stdout or done.stdout.startswith("Ann (person)")
    assert cli("show", "Desk", cwd=tmp_path).returncode == 0  # without it, the active context as before
    assert cli("show", "Desk", "--memory-path", memory, "--context", "work", cwd=tmp_path).returncode == 0
    env_only = cli("show", "Ann", cwd=tmp_path, MEMORY_FILE_PATH=memory)  # named at launch, as the server reads it
    assert env_only.returncode == 0, env_only.stderr
    assert cli("show", "Desk", cwd=tmp_path, MEMORY_FILE_PATH=memory, MEMORY_DEFAULT_CONTEXT="work").returncode == 0


def test_search_every_context_labels_each_hit(memory, tmp_path, user_folders):
    work = write_memory(tmp_path / "work.jsonl", [{"type": "entity", "name": "Rent", "entityType": "bill",
                                                   "observations": ["due monthly"]}])  # fmt: skip
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(json.dumps({"contexts": [{"name": "work", "path": str(work)}]}), encoding="utf-8")
    done = cli("search", "rent", "--context", "*", "--memory-path", memory, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "* → default, work"
    assert "1. [work] Rent (bill)" in done.stdout and "[default] Ann (person)" in done.stdout
    unknown = cli("search", "rent", "--context", "nope", "--memory-path", memory)
    assert unknown.returncode == 3 and "Unknown context 'nope'" in unknown.stderr


def test_search_every_context_skips_a_file_it_cannot_read_and_says_why(memory, tmp_path, user_folders):
    (tmp_path / "broken.jsonl").mkdir()  # a folder where the memory file should be
    registry = Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json"
    registry.parent.mkdir(parents=True)
    entries = [{"name": "broken", "path": str(tmp_path / "broken.jsonl")}]
    registry.write_text(json.dumps({"contexts": entries}), encoding="utf-8")
    done = cli("search", "rent", "--context", "*", "--memory-path", memory, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "* → default"
    assert "1. Ann (person)" in done.stdout
    assert "not searched: broken:" in done.stderr and "folder" in done.stderr


def test_search_limit_says_when_there_is_more(memory):
    done = cli("search", "a", "--mode", "keyword", "--limit", "1", "--memory-path", memory)
    assert done.returncode == 0
    assert "(the first 1; --limit N shows more)" in done.stdout


def test_first_search_of_a_large_memory_shows_a_progress_bar_on_a_terminal(tmp_path):
    records = [
        {"type": "entity", "name": f"e{i}", "entityType": "t", "observations": [f"fact {i} {j}" for j in range(4)]}
        for i in range(1200)  # 6000 texts: more than one progress step (4096)
    ]
    memory = write_memory(tmp_path / "big.jsonl", records)
    first = run_on_terminal(["search", "fact 7", "--memory-path", str(memory)])
    assert "Embedding the memory" in first and "100%" in first and "6000/6000" in first
    again = run_on_terminal(["search", "fact 8", "--memory-path", str(memory)])
    assert "Embedding the memory" not in again  # the vectors were cached by the first run
    piped = cli("search", "fact 9", "--memory-path", memory, XDG_CACHE_HOME=tmp_path / "fresh-cache")
    assert piped.returncode == 0 and "Embedding" not in piped.stderr  # no bar when stderr is not a terminal


def run_on_terminal(args: list[str]) -> str:
    """Run the command with stderr on a pseudo-terminal (as in a shell); return what it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    process = subprocess.Popen(
        [sys.executable, "-m", "memory_server", *args],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env=server_env(),
    )
    os.close(follower)
    output = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the process ends
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=120) == 0, output
    return output.decode("utf-8", "replace")


# ---- show, stats -----------------------------------------------------------------------------------------------


def test_show_prints_observations_and_relations_and_suggests_names(memory):
    done = cli("show", "Ann", "Shop", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "Ann (person)\n  - pays rent on the 1st\n  - likes hiking\n  → works on → Shop\n  ← knows ← Bob\n\n"
        "Shop (project)\n  - an online shop in Python\n  ← works on ← Ann\n"
    )
    missing = cli("show", "ann", "--memory-path", memory)
    assert missing.returncode == 1
    assert "No entity named 'ann'" in missing.stderr and "Did you mean 'Ann'?" in missing.stderr
    data = json.loads(cli("show", "Bob", "Zed", "--json", "--memory-path", memory).stdout)
    assert [e["name"] for e in data["entities"]] == ["Bob"] and data["notFound"] == ["Zed"]


def test_stats_counts_types_and_connections(memory):
    done = cli("stats", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert "  3 entities, 2 relations, 4 observations" in done.stdout
    assert "Entity types: person 2, project 1" in done.stdout
    assert "Most connected: Ann (2)" in done.stdout
    data = json.loads(cli("stats", "--json", "--memory-path", memory).stdout)
    assert data["mostConnected"][0] == ["Ann", 2] and data["unusableLines"] == 0
    assert data["vectorCaches"] == [] and "Vector cache: none yet" in done.stdout


def test_stats_reports_the_memorys_own_vector_cache(memory, tmp_path):
    other = write_memory(
        tmp_path / "other.jsonl",
        [
            {
                "type": "entity",
                "name": "Zoe",
                "entityType": "person",
                "observations": ["plays the cello", "lives in Oslo"],
            }
        ],
    )
    for path in (memory, other):
        assert cli("search", "hiking", "--memory-path", path).returncode in (0, 1)
    data = json.loads(cli("stats", "--json", "--memory-path", memory).stdout)
    caches = {cache["model"]: cache for cache in data["vectorCaches"]}
    static = caches.pop("bundled:all-MiniLM-L6-v2-static-256")
    assert static["vectors"] == 3 + 4 and static["bytes"] > 7 * 256 * 4  # 3 entities, 4 observations: its own alone
    # and the re-ranker's (rerank.py): at most its own 7 documents, none of the other memory's
    assert [(model, 0 < cache["vectors"] <= 7) for model, cache in caches.items()] == [("all-MiniLM-L6-v2", True)]
    text = cli("stats", "--memory-path", other).stdout
    assert "Vector cache:" in text and "3 vectors" in text


# ---- export --------------------------------------------------------------------------------------------------


def test_export_in_every_format(memory, tmp_path):
    jsonl_out = cli("export", "--memory-path", memory)
    assert jsonl_out.returncode == 0
    assert [json.loads(line) for line in jsonl_out.stdout.splitlines()] == SEED

    document = json.loads(cli("export", "--format", "json", "--memory-path", memory).stdout)
    assert document == {
        "entities": [{k: v for k, v in r.items() if k != "type"} for r in SEED[:3]],
        "relations": [{k: v for k, v in r.items() if k != "type"} for r in SEED[3:]],
    }

    out = tmp_path / "memory.graphml"
    done = cli("export", "--format", "graphml", "--out", out, "--memory-path", memory)
    assert done.returncode == 0 and done.stdout == ""
    graph = networkx.read_graphml(out)  # a real GraphML reader
    assert graph.is_directed() and set(graph.nodes) == {"Ann", "Shop", "Bob"}
    assert graph.nodes["Ann"]["entityType"] == "person"
    assert json.loads(graph.nodes["Ann"]["observations"]) == ["pays rent on the 1st", "likes hiking"]
    assert graph.edges["Bob", "Ann"]["relationType"] == "knows"

    markdown = cli("export", "--format", "markdown", "--memory-path", memory).stdout
    assert markdown.startswith("# Memory: default\n\n3 entities, 2 relations, 4 observations.\n")
    assert "## person (2)\n\n### Ann\n\n- pays rent on the 1st\n- likes hiking\n" in markdown
    assert "- → *works on* → Shop" in markdown and "- ← *knows* ← Bob" in markdown


def test_export_never_writes_over_the_memory_and_says_what_it_left_out(memory, tmp_path):
    refused = cli("export", "--out", memory, "--memory-path", memory)
    assert refused.returncode == 3 and "is the memory file of context 'default'" in refused.stderr
    broken = write_memory(tmp_path / "broken.jsonl", SEED, BAD_LINES[:1])
    done = cli("export", "--memory-path", broken)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == len(SEED)
    assert "1 unusable line of" in done.stderr


# ---- where --out and standard output go ----------------------------------------------------------------------


@pytest.fixture
def registered(tmp_path: Path, user_folders: dict[str, str]) -> dict[str, Path]:
    """A registry with the standard default memory, a fixed 'work' memory, and two project templates; another
    project's file and a private project file of the kind the templates name, none of them the current one."""
    for folder in ("XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        (Path(user_folders[folder]) / APP).mkdir()
    (tmp_path / "work").mkdir()
    files = {
        "default": write_memory(Path(user_folders["XDG_DATA_HOME"]) / APP / "memory.jsonl", SEED),
        "work": write_memory(tmp_path / "work" / "work.jsonl", SEED[:2]),
        "registry": Path(user_folders["XDG_CONFIG_HOME"]) / APP / "contexts.json",
    }
    contexts = [
        {"name": "default", "path": str(files["default"])},
        {"name": "work", "path": str(files["work"])},
        {"name": "project", "path": "{projectDir}/.ai-memory.jsonl"},
        {"name": "private", "path": "~/.ai-memory/projects/{projectId}.jsonl"},
    ]
    files["registry"].write_text(json.dumps({"contexts": contexts}), encoding="utf-8")
    other = tmp_path / "elsewhere" / "shop"
    (other / ".git").mkdir(parents=True)
    files["other project"] = write_memory(other / ".ai-memory.jsonl", SEED[:1])
    private = Path(user_folders["HOME"]) / ".ai-memory" / "projects"
    private.mkdir(parents=True)
    files["private"] = write_memory(private / "shop-0123abcd.jsonl", SEED[:1])
    return files


def test_out_never_replaces_a_memory_or_the_registry_however_it_is_spelled(registered, tmp_path):
    files = registered
    (tmp_path / "link.jsonl").symlink_to(files["default"])
    (tmp_path / "data-link").symlink_to(files["default"].parent.parent, target_is_directory=True)
    os.link(files["work"], tmp_path / "hard-link.md")
    attempts = [
        (["view", "--out", files["default"]], "context 'default'"),
        (["export", "--format", "markdown", "--out", files["work"]], "context 'work'"),
        (["export", "--out", tmp_path / "link.jsonl"], "context 'default'"),
        (["export", "--out", tmp_path / "data-link" / APP / "memory.jsonl"], "context 'default'"),
        (["export", "--out", tmp_path / "work" / ".." / "work" / "work.jsonl"], "context 'work'"),
        (["export", "--out", tmp_path / "hard-link.md"], "context 'work'"),
        (["view", "--out", files["registry"]], "the contexts registry"),
        (["export", "--context", "work", "--out", files["other project"]], "context 'project'"),
        (["view", "--context", "work", "--out", files["private"]], "context 'private'"),
    ]
    before = {path: path.read_bytes() for path in files.values()}
    for args, owner in attempts:
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 3, (args, done.stderr)
        assert owner in done.stderr and "Nothing was written" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert {path: path.read_bytes() for path in files.values()} == before
    assert (tmp_path / "link.jsonl").is_symlink()


def test_out_writes_through_a_link_to_another_file_and_keeps_the_link(memory, tmp_path):
    page = tmp_path / "pages" / "memory.html"
    page.parent.mkdir()
    page.write_text("old page")
    (tmp_path / "latest.html").symlink_to(page)
    done = cli("view", "--out", tmp_path / "latest.html", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "latest.html").is_symlink() and page.read_text().startswith("<!doctype html>")


@pytest.mark.parametrize("command", [["export", "--format", "markdown"], ["view"]])
def test_out_into_a_named_pipe_writes_to_its_reader_and_leaves_the_pipe(memory, tmp_path, command):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()), daemon=True)
    reader.start()
    done = cli(*command, "--out", pipe, "--memory-path", memory, timeout=60)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)  # still the pipe, not a regular file put in its place
    expected = "# Memory: default" if command[0] == "export" else "<!doctype html>"
    assert received and received[0].decode().startswith(expected)


def test_out_into_the_commands_own_standard_output_pipe(memory):
    # /proc/self/fd/1 (what /dev/stdout links to) leads to a pipe that has no path of its own
    done = cli("export", "--out", "/proc/self/fd/1", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == SEED


def private_device(tmp_path: Path, name: str, minor: int) -> Path:
    """A character device node of our own (1, minor: the kernel's memory devices) in the test's folder; the
    system's /dev is never touched. Only root may make one."""
    node = tmp_path / name
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs root; the named pipe and file-size tests cover the same paths")
    return node


def test_out_into_a_character_device_writes_in_place_and_a_full_one_is_one_line(memory, tmp_path):
    null, full = private_device(tmp_path, "null", 3), private_device(tmp_path, "full", 7)
    done = cli("export", "--out", null, "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    refused = cli("export", "--out", full, "--memory-path", memory)
    assert refused.returncode == 3
    assert refused.stderr == f"error: Cannot write {full}: No space left on device. The output is incomplete.\n"
    with full.open("w") as stdout:
        piped = subprocess.run(
            [sys.executable, "-m", "memory_server", "export", "--memory-path", str(memory)],
            stdout=stdout, stderr=subprocess.PIPE, text=True, env=server_env(), timeout=300,
        )  # fmt: skip
    assert piped.returncode == 3
    assert (
        piped.stderr == "error: Cannot write to standard output: No space left on device. The output is incomplete.\n"
    )
    assert all(stat.S_ISCHR(os.lstat(node).st_mode) for node in (null, full))


def limited_to(size: int) -> Callable[[], None]:
    """For preexec_fn: files the child writes may not grow past `size` bytes (it then gets EFBIG, a real write
    error like a full disk, on any machine and without root). Such a child must get NO_BYTECODE: Python does not
    check a short write of its .pyc files and would leave cut ones that break every later import."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1"}


def test_a_write_error_is_one_line_with_exit_3_and_leaves_the_old_file(memory, tmp_path):
    big = write_memory(tmp_path / "big.jsonl", [{**SEED[0], "name": f"E{i}"} for i in range(200)])
    out = tmp_path / "export.jsonl"
    out.write_text("the previous export\n")
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "export", "--out", str(out), "--memory-path", str(big)],
        capture_output=True, text=True, env=server_env(**NO_BYTECODE), timeout=300, preexec_fn=limited_to(4096),
    )  # fmt: skip
    assert done.returncode == 3
    assert done.stderr == f"error: Cannot write {out}: File too large. Nothing was written.\n"
    assert out.read_text() == "the previous export\n" and not list(tmp_path.glob(".export.jsonl.*"))  # no temp file
    with (tmp_path / "stdout.txt").open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "memory_server", "export", "--memory-path", str(big)],
            stdout=stdout, stderr=subprocess.PIPE, text=True, env=server_env(**NO_BYTECODE), timeout=300,
            preexec_fn=limited_to(4096),
        )  # fmt: skip
    assert done.returncode == 3
    assert done.stderr == "error: Cannot write to standard output: File too large. The output is incomplete.\n"


def test_a_reader_that_stops_early_ends_the_export_quietly(tmp_path):
    big = write_memory(tmp_path / "big.jsonl", [{**SEED[0], "name": f"E{i}"} for i in range(3000)])
    for command in (["export"], ["export", "--format", "markdown"], ["show", "E1", "E2"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # like `| head -c1` once it has its byte
        try:
            done = subprocess.run(
                [sys.executable, "-m", "memory_server", *command, "--memory-path", str(big)],
                stdout=write_end, stderr=subprocess.PIPE, text=True, env=server_env(), timeout=300,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (0, ""), command


# ---- import --------------------------------------------------------------------------------------------------


def test_import_a_file_written_by_the_official_server(tmp_path):
    target = tmp_path / "memory.jsonl"
    done = cli("import", OFFICIAL, "--memory-path", target)
    assert done.returncode == 0, done.stderr
    assert (
        "official JSONL, 7 records" in done.stdout and "added 4 entities (7 observations), 3 relations" in done.stdout
    )
    assert jsonl(target) == jsonl(OFFICIAL)  # every line, as the official server wrote it
    before = target.read_bytes()
    again = cli("import", OFFICIAL, "--memory-path", target)
    assert again.returncode == 0 and "nothing new: 7 records already there" in again.stdout
    assert target.read_bytes() == before


def test_import_into_a_memory_saved_on_windows_keeps_its_crlf_line_ends(memory):
    memory.write_bytes(memory.read_bytes().replace(b"\n", b"\r\n"))
    done = cli("import", OFFICIAL, "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    data = memory.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > len(SEED)


def test_import_merges_duplicates_and_loses_nothing(memory, tmp_path):
    other = write_memory(
        tmp_path / "memory.json",  # the official server's old file name, same lines
        [
            {"type": "entity", "name": "Ann", "entityType": "person", "observations": ["likes hiking", "has a cat"]},
            {"type": "entity", "name": "Ann", "entityType": "person", "observations": ["has a cat", "reads"]},
            {"type": "entity", "name": "Cat", "entityType": "animal", "observations": ["named Tom"]},
            {"type": "relation", "from": "Ann", "to": "Cat", "relationType": "owns"},
            {"type": "relation", "from": "Ann", "to": "Shop", "relationType": "works on"},
        ],
    )
    done = cli("import", other, "--json", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["entitiesAdded"], report["observationsAdded"], report["relationsAdded"]) == (1, 2, 1)
    records = {(r["type"], r.get("name") or (r["from"], r["to"])): r for r in jsonl(memory)}
    assert records[("entity", "Ann")]["observations"] == ["pays rent on the 1st", "likes hiking", "has a cat", "reads"]
    assert records[("entity", "Cat")]["observations"] == ["named Tom"]
    assert ("relation", ("Ann", "Cat")) in records and len(jsonl(memory)) == len(SEED) + 2


def test_import_dry_run_says_what_would_change_and_writes_nothing(memory, tmp_path):
    before = memory.read_bytes(), memory.stat().st_mtime_ns
    done = cli("import", OFFICIAL, "--dry-run", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Dry run: ") and "would add 3 entities" in done.stdout
    assert "Nothing was written." in done.stdout
    assert (memory.read_bytes(), memory.stat().st_mtime_ns) == before


def test_import_an_mcp_knowledge_graph_store(memory, tmp_path):
    aim = tmp_path / ".aim"
    aim.mkdir()
    store = aim / "memory-work.jsonl"
    # As mcp-knowledge-graph writes it: its marker line first, entity keys spread in any order, no final newline.
    store.write_text(
        '{"type":"_aim","source":"mcp-knowledge-graph"}\n'
        '{"type":"entity","name":"Ann","entityType":"human","observations":["has a cat"]}\n'
        '{"type":"entity","entityType":"tool","name":"Vim","observations":["an editor"]}\n'
        '{"type":"relation","from":"Ann","to":"Vim","relationType":"uses"}',
        encoding="utf-8",
    )
    folder = cli("import", aim, "--from", "aim", "--memory-path", memory)
    assert folder.returncode == 3 and "memory-work.jsonl" in folder.stderr and "--context work" in folder.stderr
    wrong = cli("import", store, "--from", "official", "--memory-path", memory)
    assert wrong.returncode == 3 and "use --from aim" in wrong.stderr
    done = cli("import", store, "--from", "aim", "--memory-path", memory)
    assert done.returncode == 0, done.stderr
    assert "mcp-knowledge-graph store, 3 records" in done.stdout
    assert "'Ann': the file gives type 'human', the memory keeps 'person'" in done.stdout
    names = [r.get("name") for r in jsonl(memory)]
    assert "Vim" in names and names.count("Ann") == 1
    not_aim = cli("import", OFFICIAL, "--from", "aim", "--memory-path", memory)
    assert not_aim.returncode == 3 and "not an mcp-knowledge-graph store" in not_aim.stderr


def test_import_of_an_exported_json_document_round_trips(memory, tmp_path):
    document = tmp_path / "export.json"
    assert cli("export", "--format", "json", "--out", document, "--memory-path", memory).returncode == 0
    copy = tmp_path / "copy.jsonl"
    done = cli("import", document, "--memory-path", copy)
    assert done.returncode == 0 and "JSON document" in done.stdout
    assert jsonl(copy) == SEED


def test_import_refuses_a_malformed_file_and_changes_nothing(memory, tmp_path):
    bad = write_memory(tmp_path / "bad.jsonl", SEED[:1], BAD_LINES[:3])
    before = memory.read_bytes()
    done = cli("import", bad, "--memory-path", memory)
    assert done.returncode == 1
    assert f"{bad} line 2: not valid JSON" in done.stderr and f"{bad} line 4: unknown type" in done.stderr
    assert "Nothing was imported" in done.stderr
    assert memory.read_bytes() == before


def test_import_writes_under_the_servers_lock_and_respects_read_only(memory):
    before = memory.read_bytes()
    refused = cli("import", OFFICIAL, "--read-only", "--memory-path", memory)
    assert refused.returncode == 3 and "read-only" in refused.stderr
    with filelock.FileLock(lock_path_for(memory)):  # another writer holds the memory
        waited = cli("import", OFFICIAL, "--lock-timeout", "1", "--memory-path", memory)
    assert waited.returncode == 3 and "Could not lock" in waited.stderr
    assert memory.read_bytes() == before


# ---- check ---------------------------------------------------------------------------------------------------


def test_check_lists_every_unusable_line_by_number(tmp_path):
    broken = write_memory(tmp_path / "broken.jsonl", SEED, BAD_LINES)
    done = cli("check", broken)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"{broken}: 3 entities, 2 relations, 4 observations; 5 unusable lines."
    assert lines[1].startswith("  line 6: not valid JSON")
    assert lines[2] == "  line 7: entity field 'observations' is missing"
    assert lines[3] == "  line 8: unknown type 'spaceship' (expected 'entity' or 'relation')"
    assert lines[4] == "  line 9: not valid UTF-8"
    assert lines[5].startswith("  line 10: a second, different entity 'Ann'")
    data = json.loads(cli("check", broken, "--json").stdout)
    assert [u["line"] for u in data["unusable"]] == [6, 7, 8, 9, 10] and data["ok"] is False
    assert not lock_path_for(broken).exists()  # checking a file leaves nothing beside it


def test_check_passes_a_good_file_and_reads_the_context_without_one(memory, tmp_path):
    assert cli("check", OFFICIAL).returncode == 0
    done = cli("check", "--memory-path", memory)
    assert done.returncode == 0 and done.stdout.startswith(f"{memory}: 3 entities") and "no unusable" in done.stdout
    missing = cli("check", tmp_path / "nope.jsonl")
    assert missing.returncode == 3 and "nope.jsonl" in missing.stderr


def test_check_and_import_say_how_to_finish_a_git_merge_left_in_a_file(memory, tmp_path):
    """The server's warning names the way out of a conflicted memory file; `check` and `import` say the same."""
    merged = tmp_path / ".ai-memory.jsonl"
    ann = json.dumps(SEED[0])
    merged.write_text(f"<<<<<<< HEAD\n{ann}\n=======\n{json.dumps(SEED[2])}\n>>>>>>> feature\n")
    checked = cli("check", merged)
    assert checked.returncode == 1 and "  line 1: a git conflict marker" in checked.stdout
    assert "unfinished git merge" in checked.stdout and "install-merge-driver" in checked.stdout
    imported = cli("import", merged, "--memory-path", memory)
    assert imported.returncode == 1 and "unfinished git merge" in imported.stderr
    into = cli("import", OFFICIAL, "--memory-path", merged)  # a write to the conflicted memory
    assert into.returncode == 3 and "holds an unfinished git merge (conflict markers on lines 1, 3, 5)" in into.stderr
    assert "Nothing was written" in into.stderr and merged.read_text().startswith("<<<<<<< HEAD\n")


def test_check_recognises_files_that_import_reads(tmp_path):
    document = tmp_path / "graph.json"
    document.write_text(json.dumps({"entities": [SEED[0]], "relations": []}, indent=2), encoding="utf-8")
    done = cli("check", document)
    assert done.returncode == 1 and "This is a JSON document of entities and relations" in done.stdout


@pytest.mark.parametrize("command", ["check", "import"])
def test_check_and_import_refuse_a_pipe_or_a_device_at_once(memory, tmp_path, command):
    pipe = tmp_path / "memory-pipe.jsonl"
    os.mkfifo(pipe)  # no program writes to it: reading would wait forever
    before = memory.read_bytes()
    done = cli(command, pipe, "--memory-path", memory, timeout=60)
    assert done.returncode == 3
    assert done.stderr == (
        f"error: {pipe} is a named pipe (FIFO), not a file: {command} reads regular files only. "
        f"Save its content to a file first, then {command} that file.\n"
    )
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode) and memory.read_bytes() == before


# ---- view ----------------------------------------------------------------------------------------------------


def test_view_writes_outside_the_current_folder_and_opens_the_browser(memory, tmp_path, user_folders):
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    done = cli("view", "--open", "--memory-path", memory, cwd=project, BROWSER=browser)
    assert done.returncode == 0, done.stderr
    page = Path(done.stdout.strip())
    assert page == Path(user_folders["XDG_CACHE_HOME"]) / APP / "view" / "default.html"
    assert list(project.iterdir()) == []  # nothing appears in the folder the command ran in
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and '"Ann"' in html
    assert opened.read_text().strip() == page.as_uri()


def test_commands_fail_clearly_on_an_unreadable_memory(tmp_path):
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    for command in (["show", "Ann"], ["stats"], ["export"], ["view"], ["check"], ["search", "x"]):
        done = cli(*command, "--memory-path", folder)
        assert done.returncode == 3, (command, done.stderr)
        assert done.stderr.startswith("error: Cannot read memory file"), (command, done.stderr)


def test_shared_options_work_before_and_after_the_command(memory, tmp_path):
    moved = tmp_path / "elsewhere.jsonl"
    shutil.copyfile(memory, moved)
    before = cli("--memory-path", moved, "stats", "--json")
    after = cli("stats", "--json", "--memory-path", moved)
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert json.loads(before.stdout)["context"]["path"] == str(moved)
