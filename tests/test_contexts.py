import json
import re
import shutil
from pathlib import Path

import filelock
import pytest

from memory_server.contexts import (
    ContextConfigError,
    ContextRegistry,
    Contexts,
    UnknownContextError,
    new_context,
)
from memory_server.errors import MemoryServerError, ReadOnlyError
from memory_server.graph import Entity
from memory_server.project import ProjectNotFoundError
from memory_server.templates import PathTemplateError

REPO = Path(__file__).resolve().parent.parent


def registry_in(folder: Path, data: dict | str | None = None) -> ContextRegistry:
    folder.mkdir(parents=True, exist_ok=True)
    if data is not None:
        (folder / "contexts.json").write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return ContextRegistry(folder, folder / "default.jsonl")


def test_first_run_creates_a_registry_with_the_default_context(tmp_path):
    registry = registry_in(tmp_path / "cfg")
    assert [c.name for c in registry.contexts()] == ["default"]
    written = json.loads((tmp_path / "cfg" / "contexts.json").read_text())
    assert written["contexts"][0]["name"] == "default"
    assert written["activeContext"] == "default"
    assert registry.problems() == []


def test_the_example_file_loads_with_every_feature(tmp_path):
    folder = tmp_path / "cfg"
    folder.mkdir()
    shutil.copy(REPO / "contexts.example.json", folder / "contexts.json")
    registry = ContextRegistry(folder, tmp_path / "default.jsonl")
    assert registry.problems() == []
    by_name = {c.name: c for c in registry.contexts()}
    assert set(by_name) == {
        "default",
        "personal",
        "work",
        "handbook",
        "project",
        "project-notes",
        "repo",
        "project-private",
    }
    assert by_name["project"].project_based and by_name["project"].rules.markers[0] == ".git"
    assert by_name["project-notes"].project_based  # inferred from <projectDir>
    assert by_name["handbook"].read_only
    contexts = Contexts(registry)
    assert contexts.active_name == "project"
    shop = tmp_path / "shop"
    (shop / ".git").mkdir(parents=True)
    notes = contexts.resolve("project-notes", project_dir=str(shop))
    assert notes.path == shop.resolve() / ".ai" / "shop-notes.jsonl"
    assert contexts.resolve("repo", project_dir=str(shop)).path == shop.resolve() / ".ai-memory.jsonl"
    private = contexts.resolve("project-private", project_dir=str(shop))
    assert private.path.parent == Path.home() / ".ai-memory" / "projects" and private.path.name.startswith("shop-")
    assert (notes.project_file, private.project_file) == (True, False)
    assert contexts.resolve("personal").path == Path.home() / ".ai-memory" / "personal.jsonl"


def test_memory_path_option_is_the_default_context_and_names_ignore_case(tmp_path):
    registry = registry_in(tmp_path / "cfg", {"contexts": [{"name": "Work", "path": "work.jsonl"}]})
    contexts = Contexts(registry)
    assert contexts.resolve().path == tmp_path / "cfg" / "default.jsonl"
    assert contexts.resolve("work").name == "Work"
    assert contexts.resolve("WORK").path == tmp_path / "cfg" / "work.jsonl"  # relative to the registry's folder
    with pytest.raises(UnknownContextError, match="Unknown context 'home'. Known contexts: default, Work"):
        contexts.resolve("home")


def test_a_malformed_registry_is_reported_with_its_line_and_never_overwritten(tmp_path):
    text = '{\n  "contexts": [\n    {"name": "work", "path": "w.jsonl"},\n  ]\n}\n'
    registry = registry_in(tmp_path / "cfg", text)
    [problem] = registry.problems()
    assert "contexts.json" in problem and "line 4" in problem
    assert [c.name for c in registry.contexts()] == ["default"]
    with pytest.raises(ContextConfigError, match="not changed until they are fixed"):
        registry.add(new_context(Contexts(registry), "other", "/tmp/other.jsonl"))
    assert (tmp_path / "cfg" / "contexts.json").read_text() == text


def test_bad_entries_are_skipped_and_the_good_ones_kept(tmp_path):
    data = {
        "activeContext": "ghost",
        "contexts": [
            {"name": "ok", "path": "ok.jsonl"},
            {"name": "bad name!", "path": "x.jsonl"},
            {"name": "nopath"},
            {"name": "OK", "path": "dup.jsonl"},
        ],
    }
    registry = registry_in(tmp_path / "cfg", data)
    assert [c.name for c in registry.contexts()] == ["default", "ok"]
    problems = " | ".join(registry.problems())
    assert "bad name!" not in [c.name for c in registry.contexts()]
    for fragment in ("context #2", "context #3", "'path' field required", "used twice", "activeContext 'ghost'"):
        assert fragment in problems
    assert Contexts(registry).active_name == "default"


def test_registry_is_reread_when_another_process_edits_it(tmp_path):
    registry = registry_in(tmp_path / "cfg")
    other = registry_in(tmp_path / "cfg")
    other.add(new_context(Contexts(other), "work", str(tmp_path / "work.jsonl"), "Work"))
    assert [c.name for c in registry.contexts()] == ["default", "work"]
    assert registry.get("work").description == "Work"


def test_add_and_remove_keep_unknown_keys_and_never_delete_files(tmp_path):
    folder = tmp_path / "cfg"
    registry = registry_in(folder, {"contexts": [], "note": "mine", "activeContext": "default"})
    contexts = Contexts(registry)
    memory = tmp_path / "work.jsonl"
    memory.write_text('{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    registry.add(new_context(contexts, "work", str(memory)))
    contexts.set_active("work")
    registry.persist_active("work")
    with pytest.raises(ContextConfigError, match="already exists"):
        registry.add(new_context(contexts, "WORK", str(tmp_path / "w2.jsonl")))
    contexts.forget("work")
    assert contexts.active_name == "default"
    assert memory.exists()
    written = json.loads((folder / "contexts.json").read_text())
    assert written["note"] == "mine" and written["activeContext"] == "default"
    with pytest.raises(ContextConfigError, match="cannot be removed"):
        contexts.forget("default")


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("notes.txt", "must end in '.jsonl'"),
        ("{projectDir}/../escape.jsonl", "leaves the project folder"),
        ("{repoRoot}/a/../../escape.jsonl", "leaves the repository"),
        ("/tmp/{projectDir}/x.jsonl", "neither inside the project nor in one of your memory folders"),
        ("~/.ai-memory/../{projectName}.jsonl", "neither inside the project nor in one of your memory folders"),
    ],
)
def test_add_context_refuses_unsafe_paths(tmp_path, path, problem):
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    with pytest.raises((ContextConfigError, PathTemplateError), match=re.escape(problem)):
        new_context(contexts, "x", path)


@pytest.mark.parametrize(
    ("path", "meant"),
    [
        ("${projectDir}/.ai-memory.jsonl", "'{projectDir}'"),  # the shell's and VS Code's way: it named a folder '$'
        ("{{projectDir}}/.ai-memory.jsonl", "'{projectDir}'"),
        ("{projectdir}/.ai-memory.jsonl", "'{projectDir}'"),
        ("{project}/.ai-memory.jsonl", "'{projectDir}'"),
        ("~/.ai-memory/<projectName>.jsonl", "'{projectName}'"),
        ("~/.ai-memory/{repo_root}.jsonl", "'{repoRoot}'"),
        ("%USERPROFILE%/.ai-memory/work.jsonl", "'~'"),
        ("~/.ai-memory/{client}.jsonl", None),
    ],
)
def test_add_context_refuses_what_looks_like_a_variable_but_is_none(tmp_path, path, meant):
    """Such a path was taken as a plain path: `${projectDir}/m.jsonl` became <contexts folder>/$/<project>/m.jsonl,
    the memory never in the project, a folder named '$' in the config folder."""
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    with pytest.raises(ContextConfigError) as refused:
        new_context(contexts, "x", path)
    assert "is no variable" in str(refused.value) and "{projectDir}, {projectName}" in str(refused.value)
    assert (f"did you mean {meant}?" in str(refused.value)) == (meant is not None)
    assert [c.name for c in contexts.registry.contexts()] == ["default"]
    assert not [p for p in (tmp_path / "cfg").iterdir() if p.is_dir()]


def test_a_hand_written_path_with_a_wrong_variable_is_kept_with_a_warning(tmp_path):
    registry = registry_in(tmp_path / "cfg", {"contexts": [{"name": "p", "path": "${projectDir}/.ai-memory.jsonl"}]})
    assert [c.name for c in registry.contexts()] == ["default", "p"]  # its file may hold memories already
    [problem] = registry.problems()
    assert "context #1" in problem and "'${projectDir}' is no variable (did you mean '{projectDir}'?)" in problem


def test_add_context_refuses_a_file_that_is_not_a_memory_file(tmp_path):
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    other = tmp_path / "data.jsonl"
    other.write_text('{"event": "click"}\n')
    with pytest.raises(ContextConfigError, match="does not look like a memory file"):
        new_context(contexts, "x", str(other))


def test_add_context_validates_name_and_markers(tmp_path):
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    with pytest.raises(ContextConfigError, match="'name' string should match pattern"):
        new_context(contexts, "../etc", "/tmp/x.jsonl")
    with pytest.raises(ContextConfigError, match="plain file or folder name"):
        new_context(contexts, "p", "{projectDir}/m.jsonl", markers=["../../secret"])


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/tmp/" + "x" * 100_000 + ".jsonl", "it has 100,011 bytes; a path may have at most 4,095"),
        ("{projectDir}/" + "n" * 300 + ".jsonl", "has more than the 255 bytes a name may have"),
        ("~/.ai-memory/" + "a/" * 2030 + "{projectId}.jsonl", "it leads to a path the system cannot open"),
    ],
)
def test_add_context_refuses_a_path_too_long_and_says_so(tmp_path, path, why):
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    (tmp_path / "shop" / ".git").mkdir(parents=True)
    with pytest.raises(ContextConfigError, match=re.escape(why)) as refused:
        new_context(contexts, "long", path, project_dir=str(tmp_path / "shop"))
    assert "is too long" in str(refused.value) and "Give a shorter path." in str(refused.value)
    assert len(str(refused.value)) < 300  # the path is cut in the message, not echoed whole


def test_a_link_from_one_memory_folder_into_another_is_followed_and_written(tmp_path):
    registry = registry_in(tmp_path / "cfg")
    contexts = Contexts(registry)
    shared = registry.default_path.parent / "projects"  # the data folder: another memory folder
    shared.mkdir()
    (Path.home() / ".ai-memory").mkdir()
    (Path.home() / ".ai-memory" / "projects").symlink_to(shared, target_is_directory=True)
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    config = new_context(contexts, "private", "~/.ai-memory/projects/{projectName}.jsonl", project_dir=str(project))
    registry.add(config)
    resolved = contexts.resolve("private", project_dir=str(project))
    contexts.store(resolved).mutate(lambda graph: graph.create_entities([Entity("Ann", "person", ["in sync"])]))
    assert "Ann" in (shared / "shop.jsonl").read_text() and (Path.home() / ".ai-memory" / "projects").is_symlink()
    elsewhere = tmp_path / "Dropbox"
    elsewhere.mkdir()
    (Path.home() / ".ai-memory" / "projects").unlink()
    (Path.home() / ".ai-memory" / "projects").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PathTemplateError, match="outside your memory folders"):
        new_context(contexts, "p2", "~/.ai-memory/projects/{projectId}.jsonl", project_dir=str(project))


def test_symlink_escape_from_the_project_is_refused(tmp_path):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "mem").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    with pytest.raises(PathTemplateError, match="symbolic link"):
        new_context(contexts, "p", "{projectDir}/mem/m.jsonl", project_dir=str(project))


def test_project_detection_start_precedence(tmp_path):
    a, b, c = (tmp_path / name for name in "abc")
    for folder in (a, b, c):
        (folder / ".git").mkdir(parents=True)
    registry = registry_in(tmp_path / "cfg", {"contexts": [{"name": "p", "path": "{projectDir}/.ai-memory.jsonl"}]})
    contexts = Contexts(registry, project_dir=b)
    contexts.roots = [c]
    assert contexts.resolve("p", project_dir=str(a)).project.root == a.resolve()
    assert contexts.resolve("p").project.root == b.resolve()
    contexts.project_dir = None
    assert contexts.resolve("p").project.root == c.resolve()


def test_unresolvable_project_context_fails_instead_of_falling_back(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    registry = registry_in(tmp_path / "cfg", {"contexts": [{"name": "p", "path": "{projectDir}/.ai-memory.jsonl"}]})
    with pytest.raises(ProjectNotFoundError, match="the server's current folder"):
        Contexts(registry).resolve("p")


def test_read_only_contexts_refuse_writes(tmp_path):
    registry = registry_in(tmp_path / "cfg", {"contexts": [{"name": "ro", "path": "ro.jsonl", "readOnly": True}]})
    with pytest.raises(ReadOnlyError, match="Context 'ro'"):
        Contexts(registry).resolve("ro").require_writable()
    Contexts(registry).resolve("default").require_writable()
    with pytest.raises(ReadOnlyError):
        Contexts(registry, read_only=True).resolve("default").require_writable()


def test_initial_active_context(tmp_path):
    registry = registry_in(tmp_path / "cfg", {"activeContext": "w", "contexts": [{"name": "w", "path": "w.jsonl"}]})
    assert Contexts(registry).active_name == "w"
    assert Contexts(registry, default_context="default").active_name == "default"
    assert Contexts(registry, default_context="nope").active_name == "w"
    named = tmp_path / "named.jsonl"  # a file named at launch: its context, not the one an earlier session saved
    assert Contexts(registry, memory_path=named).active_name == "default"
    assert Contexts(registry, memory_path=named, default_context="w").active_name == "w"


# ---- a registry other programs touch (issue 13) ------------------------------------------------------------------


def test_a_registry_unusable_for_a_moment_keeps_the_session_and_its_contexts(tmp_path):
    """An editor saving contexts.json (truncated, half written, briefly gone) must not move the session elsewhere."""
    folder = tmp_path / "cfg"
    good = json.dumps({"contexts": [{"name": "work", "path": "work.jsonl"}]})
    registry = registry_in(folder, good)
    contexts = Contexts(registry)
    contexts.set_active("work")
    for moment in ("", '{"contexts": [{"name": "wo', "[]", None):  # empty, cut short, not an object, gone
        if moment is None:
            (folder / "contexts.json").unlink()
        else:
            (folder / "contexts.json").write_text(moment)
        assert contexts.resolve().path == folder / "work.jsonl"
        assert contexts.active_name == "work" and [c.name for c in registry.contexts()] == ["default", "work"]
        [problem] = registry.problems()
        assert "cannot be used right now" in problem and "last read" in problem
        with pytest.raises(ContextConfigError, match="not changed until"):  # nor is it written over meanwhile
            registry.persist_active("work")
    assert not (folder / "contexts.json").exists(), "a registry that was read once is never re-created over a gap"
    (folder / "contexts.json").write_text(good)
    assert contexts.resolve().path == folder / "work.jsonl"
    assert registry.problems() == []


def test_an_active_context_really_removed_is_reported_never_replaced_by_default(tmp_path):
    folder = tmp_path / "cfg"
    registry = registry_in(folder, {"contexts": [{"name": "work", "path": "work.jsonl"}]})
    contexts = Contexts(registry)
    contexts.set_active("work")
    (folder / "contexts.json").write_text(json.dumps({"contexts": []}))  # read well: 'work' is really gone
    with pytest.raises(UnknownContextError, match="The active context 'work' is no longer in .*set_active_context"):
        contexts.resolve()
    assert contexts.active_name == "work"
    assert any("'work' is no longer in" in p for p in contexts.problems())
    assert contexts.resolve("default").name == "default"  # a call naming its context still works
    (folder / "contexts.json").write_text(json.dumps({"contexts": [{"name": "work", "path": "w2.jsonl"}]}))
    assert contexts.resolve().path == folder / "w2.jsonl"  # added back: the session carries on where it was


@pytest.mark.parametrize("bad", ["a\x00b.jsonl", "work\n.jsonl", "tab\there.jsonl", "esc\x1b[31m.jsonl"])
def test_paths_with_control_characters_are_refused_in_add_context_and_ignored_in_the_file(tmp_path, bad):
    contexts = Contexts(registry_in(tmp_path / "cfg"))
    with pytest.raises(ContextConfigError, match="'path' .*control character"):
        new_context(contexts, "x", str(tmp_path / bad))
    with pytest.raises(ContextConfigError, match="'markers' .*control character"):
        new_context(contexts, "p", "{projectDir}/m.jsonl", markers=[".g\x00it"])
    marked = {"name": "p", "path": "{projectDir}/m.jsonl", "projectDetectionRules": {"markers": [".g\x00it"]}}
    entries = [{"name": "ok", "path": "ok.jsonl"}, {"name": "x", "path": bad}, marked]
    text = json.dumps({"activeContext": "x", "contexts": entries}, indent=2)
    registry = registry_in(tmp_path / "hand", text)
    assert [c.name for c in registry.contexts()] == ["default", "ok"]
    problems = " | ".join(registry.problems())
    for name, number, field in (("x", 2, "path"), ("p", 3, "projectDetectionRules.markers")):
        line = text.splitlines().index(f'      "name": "{name}",') + 1
        assert f"contexts.json: line {line}, context #{number}: '{field}' " in problems, problems
    assert problems.count("this context is ignored") == 2
    assert Contexts(registry).resolve().name == "default"


def test_a_registry_that_cannot_be_created_says_why_and_keeps_the_default_context(tmp_path):
    (tmp_path / "not-a-folder").write_text("a file where the config folder should be")
    registry = ContextRegistry(tmp_path / "not-a-folder" / "cfg", tmp_path / "default.jsonl")
    contexts = Contexts(registry)
    assert contexts.resolve().path == tmp_path / "default.jsonl"
    [problem] = registry.problems()
    assert "could not be created" in problem and "Not a directory" in problem
    assert "No such file" not in problem
    with pytest.raises(MemoryServerError, match="Not a directory"):
        registry.add(new_context(contexts, "work", str(tmp_path / "work.jsonl")))


def test_temp_files_of_killed_registry_writers_are_swept_only_under_the_lock(tmp_path):
    folder = tmp_path / "cfg"
    registry_in(folder, {"contexts": []}).contexts()
    leftover = folder / ".contexts.json.0123456789abcdef.tmp"
    leftover.write_text("half a registry")  # what a writer killed inside write_atomically leaves
    with filelock.FileLock(folder / "contexts.json.lock"):  # another process writing now: its file is left alone
        registry_in(folder).contexts()
        assert leftover.exists()
    registry_in(folder).contexts()
    assert not leftover.exists()
    leftover.write_text("left by a later kill")
    registry = registry_in(folder)
    registry.contexts()
    leftover.write_text("left while this process runs")
    registry.add(new_context(Contexts(registry), "work", str(tmp_path / "work.jsonl")))  # every edit sweeps too
    assert sorted(p.name for p in folder.iterdir()) == ["contexts.json", "contexts.json.lock"]


# ---- bounded memory (issue 14) ----------------------------------------------------------------------------------


def _memories(tmp_path: Path, count: int) -> tuple[Contexts, list]:
    """`count` static contexts whose files hold about 20 KB each, all read once, oldest first."""
    contexts_list = [{"name": "default", "path": str(tmp_path / "default.jsonl")}]
    contexts_list += [{"name": f"m{i}", "path": str(tmp_path / f"m{i}.jsonl")} for i in range(count)]
    lines = [{"type": "entity", "name": f"e{j}", "entityType": "t", "observations": ["x" * 90]} for j in range(150)]
    for i in range(count):
        (tmp_path / f"m{i}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    contexts = Contexts(registry_in(tmp_path / "cfg", {"activeContext": "default", "contexts": contexts_list}))
    stores = []
    for i in range(count):
        store = contexts.store(contexts.resolve(f"m{i}"))
        with store.reading() as graph:
            assert len(graph.entities) == 150
        stores.append(store)
    return contexts, stores


def test_memories_beyond_the_size_bound_are_released_least_recently_used_first(tmp_path):
    contexts, stores = _memories(tmp_path, 6)
    size = stores[0].resident_bytes
    released = contexts.trim(limit=3 * size)
    assert set(released) == set(stores[:2])  # the last used stays whatever the bound; three more fit
    assert [store.resident_bytes > 0 for store in stores] == [False, False, True, True, True, True]
    with stores[0].reading() as graph:  # read again, correctly, when used again
        assert graph.entities["e149"].observations == ["x" * 90]
    assert contexts.trim(limit=3 * size) == [stores[2]]


def test_memories_not_used_for_a_while_are_released_but_not_the_active_one(tmp_path):
    contexts, stores = _memories(tmp_path, 3)
    contexts.set_active("m1")
    with stores[0].reading():  # used last
        pass
    assert contexts.trim(idle=0) == [stores[2]]
    assert stores[0].resident_bytes and stores[1].resident_bytes and not stores[2].resident_bytes
