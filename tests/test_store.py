import json
import multiprocessing
import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import filelock
import pytest

from memory_server import files
from memory_server.errors import (
    LockTimeoutError,
    LockUnavailableError,
    MergeConflictError,
    NotAMemoryFileError,
    ReadOnlyFileError,
)
from memory_server.files import lock_path_for
from memory_server.graph import Changes, Entity, KnowledgeGraph, Relation
from memory_server.store import TAIL_QUIET, GraphStore


def names(store: GraphStore) -> list[str]:
    with store.reading() as graph:
        return list(graph.entities)


def create(store: GraphStore, *entity_names: str) -> list[Entity]:
    return store.mutate(lambda g: g.create_entities(Entity(n, "t", [f"about {n}"]) for n in entity_names))


def test_missing_file_reads_as_empty_and_first_write_creates_parent_folders(tmp_path):
    store = GraphStore(tmp_path / "a" / "b" / "memory.jsonl")
    assert names(store) == []
    assert not store.path.parent.exists()  # reading creates nothing
    create(store, "x")
    assert store.path.read_text() == '{"type":"entity","name":"x","entityType":"t","observations":["about x"]}\n'


def test_unchanged_file_is_parsed_once(tmp_path, monkeypatch):
    store = GraphStore(tmp_path / "m.jsonl")
    create(store, "x")
    parses = []
    original = KnowledgeGraph.parse
    monkeypatch.setattr(KnowledgeGraph, "parse", classmethod(lambda cls, text: parses.append(1) or original(text)))
    for _ in range(5):
        assert names(store) == ["x"]
    create(store, "y")
    assert names(store) == ["x", "y"]
    assert parses == []  # our own writes keep the cache valid


def test_a_change_by_another_writer_is_seen(tmp_path):
    path = tmp_path / "m.jsonl"
    ours, theirs = GraphStore(path), GraphStore(path)
    create(ours, "x")
    create(theirs, "y")
    assert names(ours) == ["x", "y"]
    path.write_text('{"type":"entity","name":"z","entityType":"t","observations":[]}\n')
    assert names(ours) == ["z"]
    create(ours, "w")  # re-read under the lock before applying: z is not lost
    assert names(theirs) == ["z", "w"]


def test_additions_append_and_other_changes_rewrite_atomically(tmp_path):
    store = GraphStore(tmp_path / "m.jsonl")
    create(store, "a", "b")
    inode = os.stat(store.path).st_ino
    create(store, "c")
    assert os.stat(store.path).st_ino == inode  # appended in place
    store.mutate(lambda g: g.create_relations([Relation("a", "b", "knows")]))
    assert os.stat(store.path).st_ino == inode
    store.mutate(lambda g: g.add_observations([("a", ["new"])]))
    assert os.stat(store.path).st_ino != inode  # replaced by a new file
    assert list(tmp_path.glob("*.tmp")) == []
    assert len(store.path.read_text().splitlines()) == 4


def test_appending_to_a_file_without_final_newline(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"type":"entity","name":"a","entityType":"t","observations":[]}')  # as upstream writes
    create(GraphStore(path), "b")
    assert [line[:30] for line in path.read_text().splitlines()] == [
        '{"type":"entity","name":"a","e',
        '{"type":"entity","name":"b","e',
    ]


def test_a_call_that_changes_nothing_does_not_touch_the_file(tmp_path):
    store = GraphStore(tmp_path / "m.jsonl")
    create(store, "a")
    before = os.stat(store.path)
    create(store, "a")
    store.mutate(lambda g: g.delete_entities(["nobody"]))
    store.mutate(lambda g: g.add_observations([("a", ["about a"])]))
    after = os.stat(store.path)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_a_failed_mutation_leaves_the_file_and_the_cache_as_they_were(tmp_path):
    store = GraphStore(tmp_path / "m.jsonl")
    create(store, "a")
    before = store.path.read_bytes()
    with pytest.raises(LookupError):
        store.mutate(lambda g: g.add_observations([("a", ["x"]), ("ghost", ["y"])]))
    assert store.path.read_bytes() == before
    with store.reading() as graph:
        assert graph.entities["a"].observations == ["about a"]


def test_lock_timeout_is_a_clear_error(tmp_path):
    store = GraphStore(tmp_path / "m.jsonl", lock_timeout=0.2)
    with filelock.FileLock(tmp_path / "m.jsonl.lock"):
        holder = threading.Thread(target=lambda: None)
        holder.start()
        with pytest.raises(LockTimeoutError, match=r"Could not lock .*m\.jsonl\.lock within 0\.2 s"):
            _in_other_thread(lambda: create(store, "a"))
    assert not store.path.exists()


def _in_other_thread(fn):
    # filelock locks are re-entrant per thread; the holder above is this thread, so try from another one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def test_unreadable_path_names_the_file(tmp_path):
    folder = tmp_path / "actually-a-folder.jsonl"
    folder.mkdir()
    store = GraphStore(folder)
    with pytest.raises(NotAMemoryFileError, match=r"actually-a-folder.jsonl: it is a folder, not a regular file"):
        names(store)


def test_skipped_lines_are_reported_once_per_file_state(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('oops\n{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    store = GraphStore(path)
    names(store)
    warning = store.take_warning()
    assert warning is not None and "Skipped 1 line" in warning and "line 1: not valid JSON" in warning
    create(store, "b")
    assert store.take_warning() is None  # our own write: already said
    path.write_text(path.read_text() + "bad again\n")
    names(store)
    assert "Skipped 2 lines" in store.take_warning()


def test_git_conflict_markers_are_named_with_the_way_out(tmp_path):
    """A merge without our driver leaves markers in the memory file: the warning says what they are and how to
    finish the merge, not only 'not valid JSON' three times."""
    path = tmp_path / ".ai-memory.jsonl"
    ours = '{"type":"entity","name":"API","entityType":"c","observations":["REST","rate limited"]}'
    theirs = '{"type":"entity","name":"API","entityType":"c","observations":["REST","uses JWT"]}'
    path.write_text(f"<<<<<<< HEAD\n{ours}\n=======\n{theirs}\n>>>>>>> feature\n")
    store = GraphStore(path)
    names(store)
    warning = store.take_warning()
    assert "line 1: a git conflict marker" in warning and "line 5: a git conflict marker" in warning
    assert "unfinished git merge" in warning and "mcp-memory-contexts install-merge-driver" in warning
    path.write_text("oops\n")
    names(store)
    assert "unfinished git merge" not in store.take_warning()


def test_reading_creates_no_lock_file_beside_the_memory(tmp_path):
    """Outside a git repository the lock lives beside the file: a project with only a pyproject.toml, or an hg or
    svn checkout, must not find `.ai-memory.jsonl.lock` in its status because an agent read its memory."""
    project = tmp_path / "lib"
    project.mkdir()
    path = project / ".ai-memory.jsonl"
    path.write_text('{"type":"entity","name":"Lib","entityType":"t","observations":["x"]}\n')
    store = GraphStore(path)
    assert names(store) == ["Lib"]
    assert sorted(p.name for p in project.iterdir()) == [".ai-memory.jsonl"]
    path.write_text(path.read_text() + '{"type":"entity","name":"Two","entityType":"t","observations":[]}\n')
    assert names(GraphStore(path)) == names(store) == ["Lib", "Two"]  # a fresh read and a followed one
    assert not lock_path_for(path).exists()
    create(store, "Three")  # a write takes the lock, and from then on reads take it too
    assert lock_path_for(path).exists() and names(GraphStore(path)) == ["Lib", "Two", "Three"]


def test_leftover_temp_files_are_removed_by_the_next_writer(tmp_path):
    path = tmp_path / "m.jsonl"
    leftover = tmp_path / ".m.jsonl.0123456789abcdef.tmp"
    leftover.write_text("half a write")
    unrelated = tmp_path / "notes.tmp"
    unrelated.write_text("keep me")
    create(GraphStore(path), "a")
    assert not leftover.exists()
    assert unrelated.exists()


def test_a_full_disk_leaves_the_previous_file_byte_for_byte(tmp_path):
    path = tmp_path / "memory" / "m.jsonl"
    store = GraphStore(path)
    create(store, *[f"entity {i}" for i in range(50)])
    before = path.read_bytes()
    # RLIMIT_FSIZE makes every write past the limit fail with EFBIG, as a full disk would (root ignores modes).
    script = textwrap.dedent(
        f"""
        import resource, sys
        from pathlib import Path
        from memory_server.store import GraphStore
        from memory_server.errors import MemoryFileError
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 100}, resource.RLIM_INFINITY))
        sys.dont_write_bytecode = True  # a .pyc cut at the limit would be left in the tree
        store = GraphStore(Path({str(path)!r}))
        for change in (
            lambda g: g.add_observations([("entity 1", ["x" * 5000])]),
            lambda g: g.create_entities([__import__("memory_server.graph").graph.Entity("big", "t", ["y" * 90])]),
        ):
            try:
                store.mutate(change)
            except MemoryFileError as problem:
                print(problem)
            else:
                sys.exit("the write did not fail")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    messages = done.stdout.splitlines()
    assert len(messages) == 2
    for message in messages:
        assert f"Cannot write memory file {path}" in message and "File too large" in message
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.jsonl", "m.jsonl.lock"]


def _writer(path: str, worker: int, count: int) -> None:
    store = GraphStore(Path(path))
    for i in range(count):
        name = f"w{worker}-{i}"
        store.mutate(lambda g: g.create_entities([Entity(name, "t", ["x"])]))
        if i % 10 == 0:  # mix in rewrites, which race differently from appends
            store.mutate(lambda g: g.add_observations([(name, ["rewritten"])]))


def test_many_processes_writing_one_file_lose_nothing(tmp_path):
    path = tmp_path / "shared.jsonl"
    workers, count = 4, 60
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_writer, args=(str(path), w, count)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    graph = KnowledgeGraph.parse(path.read_text())
    assert graph.skipped_lines() == []
    assert len(graph.entities) == workers * count
    rewritten = [e for e in graph.entities.values() if "rewritten" in e.observations]
    assert len(rewritten) == workers * ((count + 9) // 10)


def test_threads_of_one_process_share_a_store_safely(tmp_path):
    store = GraphStore(tmp_path / "m.jsonl")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: (create(store, f"e{i}"), names(store)), range(200)))
    assert len(names(GraphStore(store.path))) == 200


# ---- other programs change the file (issue 13) ------------------------------------------------------------------
# Other programs never take our lock. The moment that matters is the one between our check of the file and our
# write: `at_open` makes another program act exactly then, the first time we open a file that matches.

OUTSIDE = '{{"type":"entity","name":"{0}","entityType":"outside","observations":[]}}'
WRITERS_SCRIPT = Path(__file__).parent / "outside_writers.py"


def at_open(monkeypatch, matches, action):
    real_open = os.open
    fired: list[str] = []

    def spy(path, flags, *args, **kwargs):
        if not fired and matches(Path(path), flags):
            fired.append(str(path))
            action()
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return fired


def save_by_rename(path: Path, content: bytes) -> None:
    temp = path.with_name(".someone-else.tmp")
    temp.write_bytes(content)
    os.replace(temp, path)


def save_in_place(path: Path, content: bytes) -> None:
    with open(path, "r+b") as file:
        file.truncate(0)
        file.write(content)


def clean_graph(path: Path) -> KnowledgeGraph:
    graph = KnowledgeGraph.parse(path.read_bytes())
    assert graph.skipped_lines() == [], path.read_text()
    return graph


def test_a_file_replaced_by_rename_just_before_an_append_gets_no_torn_line(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    create(store, "a")
    theirs = path.read_bytes() + OUTSIDE.format("theirs").encode()  # as the official server writes: no final newline
    fired = at_open(
        monkeypatch, lambda p, flags: p == path and flags & os.O_APPEND, lambda: save_by_rename(path, theirs)
    )
    create(store, "ours")
    assert fired
    assert list(clean_graph(path).entities) == ["a", "theirs", "ours"]


@pytest.mark.parametrize("save", [save_by_rename, save_in_place], ids=["by rename", "in place"])
def test_lines_another_program_saves_during_a_rewrite_are_kept(tmp_path, monkeypatch, save):
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    create(store, "a", "b")
    theirs = path.read_bytes() + (OUTSIDE.format("theirs") + "\n").encode()
    temp_file = lambda p, flags: p.name.startswith(".m.jsonl.") and flags & os.O_EXCL  # noqa: E731
    fired = at_open(monkeypatch, temp_file, lambda: save(path, theirs))
    store.mutate(lambda g: g.add_observations([("a", ["new"])]))
    assert fired
    graph = clean_graph(path)
    assert list(graph.entities) == ["a", "b", "theirs"]
    assert graph.entities["a"].observations == ["about a", "new"]
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.skipif(files._RENAMEAT2 is None, reason="renameat2 is Linux-only")
def test_a_change_in_the_instant_before_the_exchange_is_put_back_and_the_call_applied_again(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    create(store, "a")
    real_rename2 = files._rename2
    moments: list[int] = []

    def rename2(source, target, flags):
        if not moments:  # after our last check, before the exchange: another program appends in place
            moments.append(flags)
            with open(path, "ab") as file:
                file.write((OUTSIDE.format("theirs") + "\n").encode())
        return real_rename2(source, target, flags)

    monkeypatch.setattr(files, "_rename2", rename2)
    store.mutate(lambda g: g.add_observations([("a", ["new"])]))
    graph = clean_graph(path)
    assert list(graph.entities) == ["a", "theirs"] and graph.entities["a"].observations == ["about a", "new"]
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_a_slow_save_in_place_is_waited_for_and_never_made_permanent_half_done(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(OUTSIDE.format(f"e{i}") + "\n" for i in range(1000)))
    store = GraphStore(path)
    assert len(names(store)) == 1000
    # The editor truncates the file, then writes it back (with one line more) in small chunks with pauses.
    editor = subprocess.Popen(
        [sys.executable, str(WRITERS_SCRIPT), "inplace", str(path), "--saves", "1", "--pause", "0", "0", "--tag", "ed"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        while path.stat().st_size > 60_000 or path.stat().st_size == 0:  # truncated, and being written again
            assert editor.poll() is None, "the editor finished before the test could catch it mid-save"
        store.mutate(lambda g: g.add_observations([("e0", ["changed while the editor saved"])]))
        out, _ = editor.communicate(timeout=60)
    finally:
        editor.kill()
    assert out.splitlines() == [OUTSIDE.format("ed-0").replace("[]", '["saved by ed #0"]'), "done"]
    graph = clean_graph(path)
    assert len(graph.entities) == 1001
    assert graph.entities["e0"].observations == ["changed while the editor saved"]


# ---- files that are not what they seem -------------------------------------------------------------------------


def test_a_symlinked_memory_file_stays_a_link_and_its_target_gets_every_write(tmp_path):
    synced = tmp_path / "Dropbox" / "memory.jsonl"
    synced.parent.mkdir()
    link = tmp_path / "memory.jsonl"
    link.symlink_to(synced)
    store = GraphStore(link)
    create(store, "a", "b")  # creates the target through the link
    store.mutate(lambda g: g.add_observations([("a", ["rewritten"])]))
    store.mutate(lambda g: g.delete_entities(["b"]))
    create(store, "c")
    assert link.is_symlink() and os.readlink(link) == str(synced)
    assert names(GraphStore(synced)) == ["a", "c"]
    assert [p for folder in (tmp_path, synced.parent) for p in folder.iterdir() if p.suffix == ".tmp"] == []


def test_a_link_swapped_to_another_file_between_calls_is_refused_and_that_file_untouched(tmp_path):
    bashrc = tmp_path / "home" / ".bashrc"  # the conftest's HOME
    bashrc.write_text("export PATH=$HOME/bin:$PATH\n")
    path = tmp_path / "work.jsonl"
    store = GraphStore(path)
    create(store, "a")
    path.unlink()
    path.symlink_to(bashrc)  # between two calls
    message = rf"{path} is a symbolic link to {bashrc}, which is not a memory file \(its name does not end in \.jsonl\)"
    with pytest.raises(NotAMemoryFileError, match=message):
        create(store, "b")
    with pytest.raises(NotAMemoryFileError, match=message):
        names(store)
    assert bashrc.read_text() == "export PATH=$HOME/bin:$PATH\n"


def test_a_project_memory_leading_outside_the_project_or_to_package_json_is_refused(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    package = project / "package.json"
    package.write_text('{"name": "app"}\n')
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(OUTSIDE.format("x") + "\n")
    memory = project / ".ai-memory.jsonl"
    store = GraphStore(memory, allowed_root=project)
    for target, problem in ((package, "not a memory file"), (elsewhere, f"outside the project folder {project}")):
        memory.unlink(missing_ok=True)
        memory.symlink_to(target)
        with pytest.raises(NotAMemoryFileError, match=re.escape(problem)):
            create(store, "b")
    assert package.read_text() == '{"name": "app"}\n'
    assert elsewhere.read_text() == OUTSIDE.format("x") + "\n"


def test_a_hard_linked_memory_file_is_read_but_never_changed(tmp_path):
    outside = tmp_path / "outside.jsonl"
    create(GraphStore(outside), "a")
    memory = tmp_path / "project" / ".ai-memory.jsonl"
    memory.parent.mkdir()
    os.link(outside, memory)
    before = outside.read_bytes()
    store = GraphStore(memory)
    assert names(store) == ["a"]
    for change in (lambda g: g.create_entities([Entity("b", "t", [])]), lambda g: g.delete_entities(["a"])):
        with pytest.raises(NotAMemoryFileError, match=r"has 2 hard links .* Nothing was changed"):
            store.mutate(change)
    assert outside.read_bytes() == before and memory.read_bytes() == before


def test_a_read_only_file_refuses_every_change_and_stays_as_it_was(tmp_path):
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    create(store, "a", "b")
    path.chmod(0o444)
    before = path.read_bytes()
    for change in (
        lambda g: g.create_entities([Entity("c", "t", [])]),
        lambda g: g.add_observations([("a", ["x"])]),
        lambda g: g.delete_entities(["b"]),
    ):
        with pytest.raises(ReadOnlyFileError, match=rf"{path} is read-only \(mode 0444\).*chmod u\+w"):
            store.mutate(change)
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert names(store) == ["a", "b"]


def test_a_named_pipe_is_a_clear_error_not_a_hang(tmp_path):
    path = tmp_path / "m.jsonl"
    os.mkfifo(path)
    store = GraphStore(path, lock_timeout=1)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            names(store)
        except BaseException as problem:  # noqa: BLE001 - the outcome is what is checked
            outcome.append(problem)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    try:
        assert not reader.is_alive(), "reading a named pipe hung"
    finally:
        if reader.is_alive():  # unblock the open() it hangs in
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert isinstance(outcome[0], NotAMemoryFileError)
    assert f"{path}: it is a named pipe (FIFO), not a regular file" in str(outcome[0])


def test_a_link_to_a_device_is_refused_without_reading_it(tmp_path):
    # In a child process with a memory limit: a store that read /dev/zero would run out of memory, not hang the suite.
    link = tmp_path / "m.jsonl"
    link.symlink_to("/dev/zero")
    script = textwrap.dedent(
        f"""
        import resource
        from pathlib import Path
        from memory_server.store import GraphStore
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        try:
            with GraphStore(Path({str(link)!r})).reading():
                pass
        except Exception as problem:
            print(type(problem).__name__, problem)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith(
        f"NotAMemoryFileError Cannot read memory file {link}: it is a symbolic link to /dev/zero"
    ), done.stdout + done.stderr


# ---- the lock file ---------------------------------------------------------------------------------------------


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path):
    bashrc = tmp_path / ".bashrc"
    bashrc.write_text("alias ll='ls -l'\n")
    project = tmp_path / "repo"
    project.mkdir()
    memory = project / ".ai-memory.jsonl"
    memory.write_text(OUTSIDE.format("a") + "\n")
    lock = lock_path_for(memory)
    lock.symlink_to(os.path.relpath(bashrc, project))  # as a cloned repository could carry it
    store = GraphStore(memory)
    assert names(store) == ["a"]  # reading works, and says it went without the lock
    warning = store.take_warning()
    assert warning is not None and f"{lock}: it is a symbolic link" in warning
    with pytest.raises(LockUnavailableError, match=rf"Cannot lock {lock}: it is a symbolic link .*Delete the link"):
        create(store, "b")
    assert bashrc.read_text() == "alias ll='ls -l'\n"
    assert memory.read_text() == OUTSIDE.format("a") + "\n"
    assert lock.is_symlink()


def test_the_required_filelock_refuses_symlinked_lock_files():
    # CVE-2025-68146: filelock before 3.20.1 followed a lock file that is a symlink and truncated its target.
    fixed = (3, 20, 1)
    requirement = next(d for d in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"] if "filelock" in d)
    minimum = re.search(r">=\s*([\d.]+)", requirement)
    assert minimum is not None, requirement
    assert tuple(int(part) for part in minimum.group(1).split(".")) >= fixed
    assert tuple(int(part) for part in filelock.__version__.split(".")[:3]) >= fixed


PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"


# ---- following the file at little cost (issue 14) ---------------------------------------------------------------

OTHER_SERVER = """
import sys
from pathlib import Path
from memory_server.graph import Entity
from memory_server.store import GraphStore
store, action = GraphStore(Path(sys.argv[1])), sys.argv[2]
if action == "create":
    store.mutate(lambda g: g.create_entities([Entity("from another process", "t", ["hello"])]))
else:
    store.mutate(lambda g: g.add_observations([("e1", ["added by another process"])]))
"""


def another_server(path: Path, action: str) -> None:
    """One write by a server in another process (our code, so it records what it wrote)."""
    command = [sys.executable, "-c", OTHER_SERVER, str(path), action]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def memory_of(tmp_path: Path, count: int = 200) -> tuple[GraphStore, Path]:
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    create(store, *[f"e{i}" for i in range(count)])
    return store, path


def test_an_append_by_another_server_process_is_read_as_its_new_bytes_alone(tmp_path):
    store, path = memory_of(tmp_path)
    size = path.stat().st_size
    with store.reading() as graph:
        kept = dict(graph.entities)
    another_server(path, "create")
    with store.reading() as graph:
        assert list(graph.entities)[-1] == "from another process"
        assert all(graph.entities[name] is entity for name, entity in kept.items())
    assert store.last_load is not None
    assert (store.last_load.how, store.last_load.bytes_read, store.last_load.lines_parsed) == (
        "followed",
        path.stat().st_size - size,
        1,
    )


def test_an_append_by_another_program_parses_only_the_new_lines(tmp_path):
    store, path = memory_of(tmp_path)
    with path.open("ab") as file:  # not one of our servers: nothing recorded, no lock taken
        file.write((OUTSIDE.format("appended by hand") + "\n").encode())
    assert names(store)[-1] == "appended by hand"
    assert (store.last_load.how, store.last_load.lines_parsed) == ("grown", 1)


def test_a_rewrite_by_another_server_updates_only_the_entity_it_changed(tmp_path):
    store, path = memory_of(tmp_path)
    version = store.version
    with store.reading() as graph:
        kept = dict(graph.entities)
    another_server(path, "observe")
    with store.reading() as graph:
        assert graph.entities["e1"].observations == ["about e1", "added by another process"]
        assert graph.entities["e1"] is not kept["e1"]
        assert all(graph.entities[n] is e for n, e in kept.items() if n != "e1")
    assert (store.last_load.how, store.last_load.lines_parsed) == ("followed", 1)
    assert store.changes_since(version).entities == {"e1"}
    store.mutate(lambda g: g.add_observations([("e2", ["ours"])]))  # and our next write builds on it
    graph = clean_graph(path)
    assert graph.entities["e1"].observations[-1] == "added by another process"
    assert graph.entities["e2"].observations == ["about e2", "ours"] and len(graph.entities) == 200


@pytest.mark.parametrize("our_write", ["append", "rewrite"])
def test_an_outside_append_the_instant_our_write_lands_is_never_hidden_nor_lost(tmp_path, monkeypatch, our_write):
    """Between our write and the stamp taken of it, another program appends a line: the stamp must not pass that
    line off as ours, for this store, for another server following our record, or for our next write."""
    store, path = memory_of(tmp_path, count=3)
    other = GraphStore(path)
    names(other)

    def outside_append() -> None:
        with path.open("ab") as file:
            file.write((OUTSIDE.format("outside") + "\n").encode())

    if our_write == "append":  # append_checked: write, fsync, [the outside append], fstat
        real_fsync = os.fsync

        def fsync(fd):
            real_fsync(fd)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                outside_append()

        monkeypatch.setattr(files.os, "fsync", fsync)
        create(store, "ours")
    else:  # write_atomically: rename, [the outside append], fstat
        real_install = files._install
        monkeypatch.setattr(files, "_install", lambda *a: (real_install(*a), outside_append()))
        store.mutate(lambda g: g.add_observations([("e1", ["ours"])]))
    monkeypatch.undo()
    assert "outside" in names(store) and "outside" in names(other)
    create(store, "later")
    assert "outside" in clean_graph(path).entities


def test_an_in_place_rewrite_that_sets_the_mtime_back_before_our_write_is_seen(tmp_path):
    """A program rewrites the file in place to the same size, moving a line boundary, and restores its mtime, just
    after our read: our rewrite must not copy ranges of the old layout out of the new content (a torn line)."""
    path = tmp_path / "m.jsonl"
    store = GraphStore(path)
    store.mutate(lambda g: g.create_entities([Entity("alpha", "t", ["one1"]), Entity("beta", "t", ["two"])]))
    create(store, "delta")
    other = path.read_bytes().replace(b'"one1"', b'"on"').replace(b'"two"', b'"two22"')
    interfered: list[bool] = []

    def change(graph: KnowledgeGraph):
        if not interfered:
            st = os.stat(path)
            with path.open("r+b") as file:
                file.write(other)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            interfered.append(True)
        return graph.add_observations([("alpha", ["new"])])

    store.mutate(change)
    graph = clean_graph(path)  # no torn line
    assert graph.entities["alpha"].observations == ["on", "new"] and graph.entities["beta"].observations == ["two22"]


def test_a_change_record_that_does_not_add_up_to_the_file_is_not_trusted(tmp_path):
    store, path = memory_of(tmp_path, count=3)
    before = store.version
    with store.reading():
        base = store._stamp
    with path.open("ab") as file:
        file.write((OUTSIDE.format("outside") + "\n").encode())
    now = files.Stamp.of(os.stat(path))
    record = {"to": list(now), "from": [[list(base), [[0, base.size]]]]}  # says nothing was added: wrong
    os.setxattr(lock_path_for(path), "user.memory-contexts.changes", json.dumps(record).encode())
    assert "outside" in names(store)
    assert store.last_load.how != "followed" and store.version != before


def test_a_file_replaced_by_another_program_reuses_the_records_of_unchanged_lines(tmp_path):
    store, path = memory_of(tmp_path)
    with store.reading() as graph:
        kept = dict(graph.entities)
    save_by_rename(path, path.read_bytes().replace(b'"about e7"', b'"edited by hand"'))
    with store.reading() as graph:
        assert graph.entities["e7"].observations == ["edited by hand"]
        assert sum(graph.entities[n] is e for n, e in kept.items()) == 199
    assert (store.last_load.how, store.last_load.lines_parsed) == ("reread", 1)


def test_changes_since_names_what_changed_and_admits_what_it_cannot_tell(tmp_path):
    store, path = memory_of(tmp_path, 3)
    start = store.version
    assert store.changes_since(start) == Changes()
    create(store, "new")
    store.mutate(lambda g: g.delete_entities(["e0"]))
    store.mutate(lambda g: g.create_relations([Relation("e1", "e2", "knows")]))
    changes = store.changes_since(start)
    assert changes.entities == {"new", "e0"} and changes.relations == {("e1", "e2", "knows")}
    path.write_text(path.read_text().replace("about e2", "changed"))
    names(store)
    assert store.changes_since(start).entities == {"new", "e0", "e2"}
    store.release()
    names(store)
    assert store.changes_since(start) is None  # read again from scratch: every record is a new object


def test_a_released_store_reads_its_file_again_correctly(tmp_path):
    store, path = memory_of(tmp_path, 5)
    assert store.resident_bytes == path.stat().st_size
    assert store.release() and store.resident_bytes == 0 and not store.release()
    another_server(path, "observe")  # changes while nothing is held
    save_by_rename(path, path.read_bytes() + (OUTSIDE.format("by rename") + "\n").encode())
    assert names(store) == ["e0", "e1", "e2", "e3", "e4", "by rename"]
    assert store.last_load.how == "parsed"
    store.mutate(lambda g: g.add_observations([("e3", ["after the release"])]))
    store.release()
    graph = clean_graph(path)
    assert graph.entities["e1"].observations == ["about e1", "added by another process"]
    assert graph.entities["e3"].observations == ["about e3", "after the release"]
    assert list(graph.entities) == names(store)


def test_a_store_in_use_is_not_released(tmp_path):
    store, _ = memory_of(tmp_path, 2)
    with store.reading():
        assert _in_other_thread(store.release) is False
    assert store.release()


WINDOWS_FILE = (
    '\ufeff{"type":"entity","name":"e0","entityType":"t","observations":["about e0"]}\r\n'
    '{"type":"entity","name":"e1","entityType":"t","observations":["about e1"]}\r\n'
    "not json\r\n"
    '{"type":"relation","from":"e0","to":"e1","relationType":"knows"}'  # the official server ends without a newline
).encode()


def test_a_file_saved_on_windows_keeps_its_crlf_line_ends_for_every_writer_and_follower(tmp_path):
    """Our appends (append_checked) and rewrites (write_atomically) end their lines in CRLF like the file's own, and
    so do a server's in another process; each server follows the other's writes from their new bytes alone, to the
    graph a fresh read gives, and writes CRLF after it."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(WINDOWS_FILE)
    store, other = GraphStore(path), GraphStore(path)
    create(store, "appended")
    assert path.read_bytes().startswith(WINDOWS_FILE)  # an append: every byte before it kept, the BOM too
    names(other)
    rewrites = [
        (lambda g: g.add_observations([("e1", ["ours"])]), "followed"),
        (lambda g: g.delete_entities(["e0"]), "reread"),  # e0's line held the BOM, which moves to e1's: see below
    ]
    for write, how in rewrites:
        store.mutate(write)
        assert names(other) == names(GraphStore(path)) and other.last_load.how == how
    create(other, "by the other")
    another_server(path, "create")  # another process: it reads the whole file, then appends
    another_server(path, "observe")  # and rewrites
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") == 5 and b"\nnot json\r\n" in data
    fresh = KnowledgeGraph.parse(data)
    for each in (store, other):
        with each.reading() as graph:
            assert [e.to_dict() for e in graph.entity_list()] == [e.to_dict() for e in fresh.entity_list()]
        assert each.last_load.how == "followed"
    assert fresh.entities["e1"].observations == ["about e1", "ours", "added by another process"]
    store.mutate(lambda g: g.add_observations([("appended", ["after following"])]))
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n")


def test_a_byte_order_mark_stays_at_the_start_whoever_rewrites_the_first_line(tmp_path):
    """Two servers take turns at rewriting and deleting the first record of a file saved with a BOM: the file starts
    with its BOM, once, after every write, and each server's graph is the file's. A rewrite of the first line is
    followed from its new bytes; when the BOM moves to the next line, that line is new bytes in another line's place,
    which the follower reads again (rare: a BOM file's first record deleted)."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(WINDOWS_FILE + b"\r\n")  # ended: a last line without its end is followed by a full read
    store, other = GraphStore(path), GraphStore(path)
    names(other)
    writes = [
        (store, lambda g: g.add_observations([("e0", ["ours"])]), "followed"),
        (other, lambda g: g.delete_entities(["e0"]), "reread"),  # the relation goes too: the BOM moves to e1's line
        (store, lambda g: g.add_observations([("e1", ["ours"])]), "followed"),
        (other, lambda g: g.delete_entities(["e1"]), "reread"),  # only "not json" is left
    ]
    for writer, write, how in writes:
        writer.mutate(write)
        data = path.read_bytes()
        assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\xef\xbb\xbf") == 1, data
        follower = other if writer is store else store
        assert names(follower) == names(GraphStore(path)) and follower.last_load.how == how
    assert path.read_bytes() == b"\xef\xbb\xbfnot json\r\n"


def test_a_file_with_lf_line_ends_is_written_with_lf_alone(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(WINDOWS_FILE.replace(b"\r\n", b"\n"))
    store = GraphStore(path)
    create(store, "appended")
    store.mutate(lambda g: g.add_observations([("e1", ["ours"])]))
    another_server(path, "create")
    assert b"\r" not in path.read_bytes()


CONVERT = """
import os, sys
path, ending, how = sys.argv[1], sys.argv[2].encode().decode("unicode_escape").encode(), sys.argv[3]
with open(path, "rb") as file:
    lines = file.read().splitlines()
data = b"".join(line + ending for line in lines)
if how == "in place":
    with open(path, "r+b") as file:
        file.truncate(0)
        file.write(data)
else:
    with open(path + ".converted", "wb") as file:
        file.write(data)
    os.replace(path + ".converted", path)
"""


@pytest.mark.parametrize("how", ["in place", "by rename"])
def test_line_ends_another_program_converts_are_the_ones_every_later_write_uses(tmp_path, how):
    """A program (dos2unix, an editor, git's autocrlf) converts the file LF -> CRLF and back while two servers
    follow it: the next append and rewrite of each, and of a server in another process, end their lines as the file
    ends them now, never as it ended them when the server first read it."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(WINDOWS_FILE.replace(b"\r\n", b"\n") + b"\n")
    store, other = GraphStore(path), GraphStore(path)
    names(store), names(other)
    for ending, outside in (("\\r\\n", "create"), ("\\n", "observe")):
        command = [sys.executable, "-c", CONVERT, str(path), ending, how]
        done = subprocess.run(command, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        create(store, f"appended after {ending}")
        other.mutate(lambda g: g.add_observations([("e1", [f"rewritten after {ending}"])]))  # noqa: B023
        store.mutate(lambda g: g.add_observations([("e0", [f"rewritten after {ending}"])]))  # noqa: B023
        create(other, f"appended by the other after {ending}")
        another_server(path, outside)  # an append, then a rewrite
        data = path.read_bytes()
        crlf = ending == "\\r\\n"
        assert data.count(b"\r\n") == (data.count(b"\n") if crlf else 0), data
        assert names(store) == names(other) == names(GraphStore(path))


def test_a_file_touched_or_saved_again_unchanged_is_noticed_as_no_change(tmp_path):
    """`touch`, or the same bytes saved again, is no change to tell subscribers about (the file is read to know:
    its size is the same); an edit of the same size is one; a change of size is told without reading anything."""
    store, path = memory_of(tmp_path, 3)
    names(store)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert store.noticed_change() is False
    save_by_rename(path, path.read_bytes())
    assert store.noticed_change() is False and store.noticed_change() is False
    save_in_place(path, path.read_bytes().replace(b"about e1", b"about e2"))
    assert store.noticed_change() is True and store.noticed_change() is False
    loads = store.loads.total()
    with path.open("ab") as file:
        file.write((OUTSIDE.format("appended") + "\n").encode())
    assert store.noticed_change() is True and store.loads.total() == loads


def test_a_write_to_a_file_with_conflict_markers_is_refused_and_changes_nothing(tmp_path):
    """Both sides of an unfinished merge are in the file (the first loaded, the second kept as a skipped line): a
    write would change the first and merge or drop the second, so it is refused until the markers are gone."""
    path = tmp_path / ".ai-memory.jsonl"
    ours = '{"type":"entity","name":"API","entityType":"c","observations":["REST"]}'
    theirs = '{"type":"entity","name":"API","entityType":"c","observations":["REST"]}'  # the same: it would merge
    conflicted = f"<<<<<<< HEAD\n{ours}\n=======\n{theirs}\n>>>>>>> feature\n".encode()
    path.write_bytes(conflicted)
    store = GraphStore(path)
    with pytest.raises(MergeConflictError, match=r"unfinished git merge \(conflict markers on lines 1, 3, 5\)"):
        store.mutate(lambda g: g.add_observations([("API", ["uses JWT"])]))
    assert path.read_bytes() == conflicted and names(store) == ["API"]
    path.write_text(ours + "\n")  # the merge finished
    store.mutate(lambda g: g.add_observations([("API", ["uses JWT"])]))
    assert "uses JWT" in path.read_text()


@pytest.mark.parametrize("content", [b"", OUTSIDE.format("A").encode()], ids=["empty", "one record"])
def test_a_file_just_saved_with_a_byte_order_mark_is_not_taken_for_one_being_written(tmp_path, content):
    """Notepad saves a file with a BOM and without a final newline: its last line is whole (json.loads refused it for
    its BOM, so a read warned that another program was writing the file, and a write waited for it)."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + content)
    store = GraphStore(path)
    started = time.monotonic()
    assert names(store) == (["A"] if content else []) and store.take_warning() is None
    create(store, "B")
    assert time.monotonic() - started < TAIL_QUIET and path.read_bytes().startswith(b"\xef\xbb\xbf" + content)
