"""The git merge driver (merge.py): record-by-record three-way merges, their properties, and real git merges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import commit_file, git, git_env, new_repository
from helpers import call, connect, entity, failure, ok, server_env, text_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_server import merge as merging
from memory_server.graph import Entity, KnowledgeGraph, Relation, encode_entity, encode_relation

MEMORY = ".ai-memory.jsonl"


def e(name: str, *observations: str, entity_type: str = "person", **extra: object) -> str:
    return encode_entity(Entity(name, entity_type, list(observations), dict(extra))) + "\n"


def r(source: str, target: str, relation_type: str = "knows", **extra: object) -> str:
    return encode_relation(Relation(source, target, relation_type, dict(extra))) + "\n"


def merged(base: str, ours: str, theirs: str) -> merging.MergeResult:
    result = merging.merge(base.encode(), ours.encode(), theirs.encode())
    assert merging.merge(base.encode(), theirs.encode(), ours.encode()) == result, "the direction changed the result"
    return result


def content(data: bytes | str) -> tuple[dict, set]:
    """What a memory file holds: entities (type, observations as a set, extra) and relations."""
    graph = KnowledgeGraph.parse(data)
    entities = {n: (x.entity_type, frozenset(x.observations), json.dumps(x.extra)) for n, x in graph.entities.items()}
    return entities, set(graph.relations)


# ---- the rules, one by one -------------------------------------------------------------------------------------


def test_additions_from_both_sides_are_kept():
    base = e("Ann", "likes tea")
    result = merged(base, base + e("Bo") + r("Ann", "Bo"), base + e("Cy", "new") + r("Cy", "Ann", "helps"))
    entities, relations = content(result.data)
    assert set(entities) == {"Ann", "Bo", "Cy"}
    assert relations == {("Ann", "Bo", "knows"), ("Cy", "Ann", "helps")}
    assert result.conflicts == []


def test_a_deletion_on_one_side_is_applied():
    base = e("Ann", "likes tea", "runs") + e("Bo") + r("Ann", "Bo") + r("Bo", "Ann")
    ours = e("Ann", "likes tea") + e("Bo") + r("Bo", "Ann")  # deleted an observation and a relation
    theirs = e("Ann", "likes tea", "runs") + e("Dee")  # deleted Bo, and with it Bo's relations, as the tool does
    entities, relations = content(merged(base, ours, theirs).data)
    assert entities == {"Ann": ("person", frozenset({"likes tea"}), "{}"), "Dee": ("person", frozenset(), "{}")}
    assert relations == set()


def test_an_entity_changed_on_both_sides_is_merged_observation_by_observation():
    base = e("Ann", "a", "b", "c")
    ours = e("Ann", "a", "c", "from ours")  # deleted b, added one
    theirs = e("Ann", "b", "c", "from theirs")  # deleted a, added one
    result = merged(base, ours, theirs)
    [line] = result.data.decode().splitlines()
    assert json.loads(line)["observations"] == ["c", "from ours", "from theirs"]
    assert result.conflicts == []


def test_an_entity_added_on_both_sides_keeps_every_observation():
    result = merged("", e("Ann", "x", "y"), e("Ann", "y", "z"))
    assert content(result.data)[0]["Ann"][1] == {"x", "y", "z"}
    assert result.conflicts == []


def test_deleted_on_one_side_and_extended_on_the_other_keeps_only_what_was_added():
    base = e("Ann", "old fact") + e("Bo")
    ours = e("Bo")  # Ann deleted
    theirs = e("Ann", "old fact", "new fact") + e("Bo")
    entities, _ = content(merged(base, ours, theirs).data)
    assert entities["Ann"][1] == {"new fact"}


def test_a_relation_added_to_an_entity_deleted_on_the_other_side_brings_it_back_empty():
    base = e("Ann", "old") + e("Bo")
    entities, relations = content(merged(base, e("Bo"), base + r("Bo", "Ann", "visits")).data)
    assert entities["Ann"] == ("person", frozenset(), "{}")
    assert relations == {("Bo", "Ann", "visits")}


def test_relations_merge_the_same_way_and_keep_unknown_fields():
    base = r("A", "B", "knows", since=2020) + r("A", "C")
    ours = r("A", "B", "knows", since=2021) + r("A", "C")
    theirs = r("A", "B", "knows", since=2020, note="x")
    result = merged(e("A") + e("B") + e("C") + base, e("A") + e("B") + e("C") + ours, e("A") + e("B") + e("C") + theirs)
    graph = KnowledgeGraph.parse(result.data)
    assert set(graph.relations) == {("A", "B", "knows")}  # A->C deleted by theirs
    assert graph.relations["A", "B", "knows"].extra == {"since": 2021, "note": "x"}


def test_lines_that_are_not_records_are_kept_unless_one_side_deleted_them():
    broken, other = "{not json\n", '{"type":"note","text":"kept"}\n'
    base = e("Ann") + broken + other
    result = merged(base, e("Ann", "x") + broken + other, e("Ann") + other)  # theirs fixed the broken line
    assert result.data.decode().splitlines() == [e("Ann", "x").strip(), other.strip()]
    result = merged("", "<<<<<<< HEAD\n" + e("Ann"), e("Bo"))
    assert "<<<<<<< HEAD" in result.data.decode().splitlines()


def test_a_real_conflict_keeps_both_versions_and_is_reported():
    base = e("Ann", "a")
    ours, theirs = e("Ann", "a", "b", entity_type="human"), e("Ann", "a", "c", entity_type="robot")
    result = merged(base, ours, theirs)
    [conflict] = result.conflicts
    assert "Ann" in conflict and "entityType" in conflict and "'human'" in conflict and "'robot'" in conflict
    lines = [json.loads(line) for line in result.data.decode().splitlines()]
    assert [x["entityType"] for x in lines] == ["human", "robot"]  # the side whose file sorts first is loaded
    assert lines[0]["observations"] == ["a", "b", "c"]  # the observations still merge
    graph = KnowledgeGraph.parse(result.data)
    [skipped] = graph.skipped_lines()
    assert skipped.line_number == 2 and "second, different entity" in skipped.reason


def test_the_output_is_the_official_format_one_line_per_entity():
    # The official server may store one name twice; the hand-edited spacing is not the official format.
    base = '{"type": "entity", "name": "Ann", "entityType": "person", "observations": ["a"]}\n' + e("Ann", "b")
    result = merged(base, base + e("Bo"), base)
    assert result.data.decode() == e("Ann", "a", "b") + e("Bo")


def test_the_output_keeps_the_line_ending_of_our_file():
    """git takes the result from our file: a memory file saved on Windows (CRLF) stays CRLF, whoever wrote theirs;
    a line that is not a record keeps its own ending."""
    crlf = lambda text: text.replace("\n", "\r\n")  # noqa: E731
    base = e("Ann", "a") + "{not json\n"
    result = merged(crlf(base), crlf(base + e("Bo")), crlf(e("Ann", "a", "b") + "{not json\n"))
    assert result.data.decode() == crlf(e("Ann", "a", "b") + "{not json\n" + e("Bo"))
    ours, theirs = e("Ann", "a", "b"), e("Ann", "a") + e("Cy")
    assert merging.merge(e("Ann", "a").encode(), crlf(ours).encode(), theirs.encode()).data.count(b"\r\n") == 2
    assert b"\r" not in merging.merge(e("Ann", "a").encode(), ours.encode(), crlf(theirs).encode()).data


ENDINGS = {"LF": lambda text: text, "CRLF": lambda text: text.replace("\n", "\r\n")}


@pytest.mark.parametrize("ours_ending", ENDINGS)
@pytest.mark.parametrize("theirs_ending", ENDINGS)
def test_a_line_that_is_not_a_record_is_one_line_whatever_its_line_ending(ours_ending, theirs_ending):
    """A line the server cannot read (here a differing second version, as a conflict leaves it) is known by its text,
    not by its line ending: when one side's file was saved with the other ending (a Windows editor, git without
    core.autocrlf), a deletion on the other side is still applied, a line both sides added is kept once, and a line
    neither side changed keeps the bytes of our file."""
    ours_of, theirs_of = ENDINGS[ours_ending], ENDINGS[theirs_ending]
    second = e("Ann", "a", entity_type="robot")
    for base_of in ENDINGS.values():

        def merge(base: str, ours: str, theirs: str) -> bytes:
            return merging.merge(base_of(base).encode(), ours_of(ours).encode(), theirs_of(theirs).encode()).data

        start = e("Ann", "a") + second
        assert b"robot" not in merge(start, e("Ann", "a"), start + e("Bo")), "a line our side deleted came back"
        assert b"robot" not in merge(start, start + e("Bo"), e("Ann", "a")), "a line their side deleted came back"
        kept = merge(start, start + e("Bo"), start + e("Cy"))
        assert kept.count(b"robot") == 1 and ours_of(second).encode() in kept
        added = merge(e("Ann", "a"), e("Ann", "a") + second, e("Ann", "a") + second + e("Bo"))
        assert added.count(b"robot") == 1, "a line both sides added is there twice"
        assert ours_of(second).encode() in added


# ---- properties ------------------------------------------------------------------------------------------------

NAMES = ["Ann", "Bo", "Cy", "Dee"]
FACTS = ["a", "b", "c", "d", "e"]
operation = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES), st.lists(st.sampled_from(FACTS), max_size=3)),
    st.tuples(st.just("observe"), st.sampled_from(NAMES), st.lists(st.sampled_from(FACTS), min_size=1, max_size=2)),
    st.tuples(st.just("forget"), st.sampled_from(NAMES), st.lists(st.sampled_from(FACTS), min_size=1, max_size=2)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just([])),
    st.tuples(st.just("relate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("unrelate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
)


def apply(data: bytes, operations: list) -> bytes:
    """A version of the file made by the store's own mutations, as the server would write it."""
    graph = KnowledgeGraph.parse(data)
    for kind, name, arg in operations:
        if kind == "create":
            graph.create_entities([Entity(name, "person", list(arg))])
        elif kind == "observe" and name in graph.entities:
            graph.add_observations([(name, list(arg))])
        elif kind == "forget":
            graph.delete_observations([(name, list(arg))])
        elif kind == "delete":
            graph.delete_entities([name])
        elif kind == "relate" and name in graph.entities and arg in graph.entities:
            graph.create_relations([Relation(name, arg, "knows")])
        elif kind == "unrelate":
            graph.delete_relations([(name, arg, "knows")])
    return "".join(line + "\n" for line in graph.lines()).encode()


def facts(data: bytes) -> set[tuple[str, str]]:
    return {(name, o) for name, x in KnowledgeGraph.parse(data).entities.items() for o in x.observations}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(operation, max_size=8),
    ours_ops=st.lists(operation, max_size=6),
    theirs_ops=st.lists(operation, max_size=6),
)
def test_merges_lose_no_addition_apply_every_deletion_and_ignore_direction(start, ours_ops, theirs_ops):
    base = apply(b"", start)
    ours, theirs = apply(base, ours_ops), apply(base, theirs_ops)
    result = merging.merge(base, ours, theirs)
    assert merging.merge(base, theirs, ours) == result
    assert result.conflicts == []  # entity types never differ here
    graph = KnowledgeGraph.parse(result.data)
    assert graph.skipped_lines() == []
    got = facts(result.data)
    for side in (ours, theirs):
        assert facts(side) - facts(base) <= got, "an added observation was lost"
        assert not (facts(base) - facts(side)) & got, "a deleted observation came back"
        side_relations, base_relations = content(side)[1], content(base)[1]
        assert side_relations - base_relations <= set(graph.relations), "an added relation was lost"
        assert not (base_relations - side_relations) & set(graph.relations), "a deleted relation came back"
    untouched_deleted = {
        name
        for name in content(base)[0]
        if (name not in content(ours)[0] and content(theirs)[0].get(name) == content(base)[0][name])
        or (name not in content(theirs)[0] and content(ours)[0].get(name) == content(base)[0][name])
    }
    added_relations = (content(ours)[1] | content(theirs)[1]) - content(base)[1]
    still_named = {end for relation in added_relations for end in relation[:2]}
    assert not (untouched_deleted - still_named) & set(graph.entities), "a deleted entity came back"
    assert content(merging.merge(base, base, theirs).data) == content(theirs)


# ---- real git ----------------------------------------------------------------------------------------------------


def install(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_server", "install-merge-driver", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env=git_env(),
        check=False,
    )


def branches_that_change_the_same_memory(repo: Path) -> None:
    """main and `feature` both change the committed memory file, starting from one commit."""
    commit_file(repo, MEMORY, e("Ann", "likes tea") + e("Bo", "a dog") + e("Old") + r("Ann", "Bo"), "memory")
    git(repo, "checkout", "-q", "-b", "feature")
    commit_file(repo, MEMORY, e("Ann", "likes tea", "plays chess") + e("Bo", "a dog") + r("Ann", "Bo"), "feature")
    git(repo, "checkout", "-q", "main")
    commit_file(repo, MEMORY, e("Ann", "likes tea", "speaks French") + e("Bo", "a dog") + e("Old") + e("Cy"), "main")


def test_without_the_driver_git_reports_a_conflict(tmp_path):
    repo = new_repository(tmp_path / "repo")
    branches_that_change_the_same_memory(repo)
    assert git(repo, "merge", "feature", check=False).returncode != 0
    assert "<<<<<<<" in (repo / MEMORY).read_text()


def test_two_branches_changing_the_same_entity_merge_cleanly_through_the_driver(tmp_path):
    repo = new_repository(tmp_path / "repo")
    installed = install(repo)
    assert installed.returncode == 0, installed.stderr
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "merge memory files with mcp-memory-contexts")
    branches_that_change_the_same_memory(repo)

    done = git(repo, "merge", "--no-edit", "feature", check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    entities, relations = content((repo / MEMORY).read_bytes())
    assert entities["Ann"][1] == {"likes tea", "plays chess", "speaks French"}  # nothing lost
    assert "Old" not in entities  # deleted on feature: stays deleted
    assert "Cy" in entities and relations == set()  # main deleted the relation
    assert git(repo, "status", "--porcelain").stdout == ""
    assert "<<<<<<<" not in (repo / MEMORY).read_text()


def test_a_merge_the_other_way_gives_the_same_file(tmp_path):
    repo = new_repository(tmp_path / "repo")
    assert install(repo).returncode == 0
    branches_that_change_the_same_memory(repo)
    git(repo, "merge", "-q", "--no-edit", "feature")
    on_main = (repo / MEMORY).read_bytes()
    git(repo, "checkout", "-q", "feature")
    git(repo, "merge", "-q", "--no-edit", "main~1")  # main before the merge
    assert (repo / MEMORY).read_bytes() == on_main


def test_a_real_conflict_stops_the_merge_with_a_valid_memory_file(tmp_path):
    repo = new_repository(tmp_path / "repo")
    assert install(repo).returncode == 0
    commit_file(repo, MEMORY, e("Ann", "a"), "memory")
    git(repo, "checkout", "-q", "-b", "feature")
    commit_file(repo, MEMORY, e("Ann", "a", entity_type="robot"), "robot")
    git(repo, "checkout", "-q", "main")
    commit_file(repo, MEMORY, e("Ann", "a", entity_type="human"), "human")
    done = git(repo, "merge", "feature", check=False)
    assert done.returncode != 0 and "entityType" in done.stdout + done.stderr
    # the file as the person knows it, never git's temporary copy, and what to do
    assert f"conflict in {MEMORY}: entity 'Ann'" in done.stderr and ".merge_file" not in done.stderr
    assert "then git add it" in done.stderr
    text = (repo / MEMORY).read_text()
    assert "<<<<<<<" not in text and "robot" in text and "human" in text


def test_a_line_deleted_on_our_side_stays_deleted_when_theirs_was_saved_with_crlf(tmp_path):
    """Real git without core.autocrlf: main deletes the second version a conflict left; on feature, a Windows editor
    saved the file with CRLF line ends. The merge keeps the deletion and main's LF line ends."""
    repo = new_repository(tmp_path / "repo")
    assert install(repo).returncode == 0
    second = e("Ann", "a", entity_type="robot")
    commit_file(repo, MEMORY, e("Ann", "a") + e("Bo") + second, "memory after a conflict")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / MEMORY).write_bytes((e("Ann", "a") + e("Bo", "x") + second).replace("\n", "\r\n").encode())
    git(repo, "commit", "-q", "-am", "saved on Windows")
    git(repo, "checkout", "-q", "main")
    commit_file(repo, MEMORY, e("Ann", "a") + e("Bo"), "the conflict resolved")
    done = git(repo, "merge", "--no-edit", "feature", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / MEMORY).read_bytes() == (e("Ann", "a") + e("Bo", "x")).encode()


def test_install_is_idempotent_and_local(tmp_path):
    repo = new_repository(tmp_path / "repo")
    (repo / ".gitattributes").write_text("*.png binary")  # no final newline
    first, second = install(repo), install(repo, "--repository", str(repo))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "already has" in second.stdout
    assert (repo / ".gitattributes").read_text() == "*.png binary\n.ai-memory.jsonl merge=mcp-memory-contexts\n"
    driver = git(repo, "config", "--local", "merge.mcp-memory-contexts.driver").stdout.strip()
    assert driver == "mcp-memory-contexts merge-driver %O %A %B %P"
    assert git(repo, "config", "--global", "--get-regexp", "merge", check=False).stdout == ""
    check = git(repo, "check-attr", "merge", "--", "sub/dir/.ai-memory.jsonl").stdout
    assert check.strip().endswith("merge: mcp-memory-contexts")


@pytest.mark.parametrize("pattern", ["two words", "!negated", ""])
def test_install_refuses_patterns_gitattributes_cannot_hold(tmp_path, pattern):
    repo = new_repository(tmp_path / "repo")
    refused = install(repo, pattern)
    assert refused.returncode == 2 and "pattern" in refused.stderr
    assert not (repo / ".gitattributes").exists()


def test_install_outside_a_repository_says_so(tmp_path):
    refused = install(tmp_path)
    assert refused.returncode == 2 and "rev-parse" in refused.stderr
    assert not (tmp_path / ".gitattributes").exists()


@pytest.mark.anyio
async def test_writes_during_an_unfinished_merge_are_refused_and_reads_say_why(tmp_path):
    """git stopped a merge with conflict markers in the memory file: a write would change one side's lines and merge
    or drop the other's (two versions of one record), so every write is refused, saying what to do, and the file
    keeps every byte; reads go on and say so. Once the merge is finished (here: the driver installed, the merge
    redone with it, `git add`), writes work again."""
    repo = new_repository(tmp_path / "repo")
    branches_that_change_the_same_memory(repo)
    assert git(repo, "merge", "feature", check=False).returncode != 0
    memory = repo / MEMORY
    conflicted = memory.read_bytes()
    async with connect(server_env(MEMORY_FILE_PATH=memory, MEMORY_EMBEDDING_MODEL="none"), cwd=repo) as s:
        read = await call(s, "read_graph")
        assert not read.is_error and "unfinished git merge" in text_of(read)
        assert "writes to it are refused until it is finished" in text_of(read)
        assert [e["name"] for e in read.structured_content["entities"]] == ["Ann", "Bo", "Old", "Cy"]
        for tool, arguments in [
            ("add_observations", {"observations": [{"entityName": "Ann", "contents": ["reads Tolstoy"]}]}),
            ("create_entities", {"entities": [entity("Dee")]}),
            ("delete_entities", {"entityNames": ["Bo"]}),
        ]:
            refused = await failure(s, tool, **arguments)
            assert "holds an unfinished git merge (conflict markers on lines 1, 6, 10)" in refused, refused
            assert "Nothing was written" in refused and f"git checkout -m -- {memory}" in refused, refused
            assert memory.read_bytes() == conflicted
        assert install(repo).returncode == 0
        git(repo, "checkout", "-m", "--", MEMORY)
        git(repo, "add", MEMORY)
        await ok(s, "add_observations", observations=[{"entityName": "Ann", "contents": ["reads Tolstoy"]}])
    assert json.loads(memory.read_text().splitlines()[0])["observations"] == [
        "likes tea",
        "plays chess",
        "speaks French",
        "reads Tolstoy",
    ]
