"""The commands for people, end to end: each runs as its own process (`python -m memory_server COMMAND`, and the
installed console script), on real files in the test's own folders (conftest.py points HOME and XDG there)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
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


def cli(*args: str | Path, cwd: Path | None = None, **env: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_server", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=server_env(**env),
        timeout=300,
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
        created = await session.call_tool("create_entities", {"entities": [{"name": "Cy", "entityType": "t", "observations": []}]})
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
    assert lines[1].startswith(f"  project → {project / '.ai-memory.jsonl'} [1 entities")
    assert lines[2] == f"Project here: {project} (found by its .git, from {project / 'src'})"

    data = json.loads(cli("--memory-path", memory, "contexts", "--json", cwd=project / "src").stdout)
    assert [c["name"] for c in data["contexts"]] == ["default", "project"]
    assert data["project"]["root"] == str(project) and data["project"]["marker"] == ".git"

    nowhere = cli("contexts", cwd=tmp_path)
    assert nowhere.returncode == 0 and "No project here: none of" in nowhere.stdout
    assert not (Path(user_folders["XDG_DATA_HOME"]) / APP / "memory.jsonl").exists()  # reading creates no memory


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
    other = write_memory(tmp_path / "other.jsonl", [{"type": "entity", "name": "Zoe", "entityType": "person",
                                                     "observations": ["plays the cello", "lives in Oslo"]}])
    for path in (memory, other):
        assert cli("search", "hiking", "--memory-path", path).returncode in (0, 1)
    data = json.loads(cli("stats", "--json", "--memory-path", memory).stdout)
    [cache] = data["vectorCaches"]
    assert cache["vectors"] == 3 + 4 and cache["bytes"] > 7 * 256 * 4  # 3 entities, 4 observations: its own alone
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
    assert refused.returncode == 3 and "is the memory being exported" in refused.stderr
    broken = write_memory(tmp_path / "broken.jsonl", SEED, BAD_LINES[:1])
    done = cli("export", "--memory-path", broken)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == len(SEED)
    assert "1 unusable line of" in done.stderr


# ---- import --------------------------------------------------------------------------------------------------


def test_import_a_file_written_by_the_official_server(tmp_path):
    target = tmp_path / "memory.jsonl"
    done = cli("import", OFFICIAL, "--memory-path", target)
    assert done.returncode == 0, done.stderr
    assert "official JSONL, 7 records" in done.stdout and "added 4 entities (7 observations), 3 relations" in done.stdout
    assert jsonl(target) == jsonl(OFFICIAL)  # every line, as the official server wrote it
    before = target.read_bytes()
    again = cli("import", OFFICIAL, "--memory-path", target)
    assert again.returncode == 0 and "nothing new: 7 records already there" in again.stdout
    assert target.read_bytes() == before


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


def test_check_recognises_files_that_import_reads(tmp_path):
    document = tmp_path / "graph.json"
    document.write_text(json.dumps({"entities": [SEED[0]], "relations": []}, indent=2), encoding="utf-8")
    done = cli("check", document)
    assert done.returncode == 1 and "This is a JSON document of entities and relations" in done.stdout


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
