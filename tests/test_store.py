import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import filelock
import pytest

from memory_server.errors import LockTimeoutError, MemoryFileError
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.store import GraphStore


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
    with pytest.raises(MemoryFileError, match="Cannot read memory file .*actually-a-folder.jsonl"):
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
