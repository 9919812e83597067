"""A memory's vector cache on disk: records read back bit for bit, one file per memory and model, torn or damaged
records ignored, pruning, and a lock held by another process."""

import filelock
import numpy as np

from memory_server import vector_cache
from memory_server.vector_cache import HEADER, VectorCache, caches_of, text_keys


def vectors(count: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    made = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return made / np.linalg.norm(made, axis=1, keepdims=True)


def read_all(cache: VectorCache, keys: np.ndarray, dim: int = 8) -> dict[int, np.ndarray]:
    found = {}
    for positions, chunk in cache.read(keys):
        assert chunk.shape == (len(positions), dim)
        found.update(zip(positions.tolist(), chunk))
    return found


def test_vectors_come_back_bit_for_bit_for_the_keys_asked(tmp_path):
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    texts = [f"Ann: fact {n}" for n in range(10)]
    made = vectors(10)
    cache.append(text_keys(texts[:6]), made[:6])
    cache.append(text_keys(texts[6:]), made[6:])
    asked = ["unknown text", texts[3], texts[9], texts[0]]
    found = read_all(cache, text_keys(asked))
    assert sorted(found) == [1, 2, 3]
    assert found[1].tobytes() == made[3].tobytes() and found[2].tobytes() == made[9].tobytes()
    assert cache.records() == 10


def test_each_memory_has_its_own_cache(tmp_path):
    folder = tmp_path / "model"
    work = VectorCache(folder, tmp_path / "work.jsonl", "tiny", 8)
    home = VectorCache(folder, tmp_path / "home.jsonl", "tiny", 8)
    work.append(text_keys(["Acme: a client"]), vectors(1))
    home.append(text_keys(["Ann: my sister", "Bob: my brother"]), vectors(2))
    assert work.path != home.path
    assert [c.records for c in caches_of(tmp_path, tmp_path / "work.jsonl")] == [1]
    assert [c.records for c in caches_of(tmp_path, tmp_path / "home.jsonl")] == [2]
    assert caches_of(tmp_path, tmp_path / "never-searched.jsonl") == []
    assert read_all(home, text_keys(["Acme: a client"])) == {}


def test_a_torn_last_record_is_ignored_then_dropped(tmp_path):
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    made = vectors(3)
    cache.append(text_keys(["a", "b"]), made[:2])
    with open(cache.path, "ab") as handle:  # a writer killed in the middle of its record
        handle.write(b"\x07" * 20)
    assert sorted(read_all(cache, text_keys(["a", "b"]))) == [0, 1]
    cache.append(text_keys(["c"]), made[2:])
    assert (cache.path.stat().st_size - HEADER) % (16 + 8 * 4 + 4) == 0
    assert sorted(read_all(cache, text_keys(["a", "b", "c"]))) == [0, 1, 2]


def test_a_damaged_record_fails_its_check_and_is_not_used(tmp_path):
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    cache.append(text_keys(["a", "b"]), vectors(2))
    data = bytearray(cache.path.read_bytes())
    data[HEADER + 16 + 5] ^= 0xFF  # a byte of the first vector
    cache.path.write_bytes(bytes(data))
    assert sorted(read_all(cache, text_keys(["a", "b"]))) == [1]


def test_another_models_or_a_damaged_header_is_started_again(tmp_path):
    memory = tmp_path / "memory.jsonl"
    VectorCache(tmp_path / "model", memory, "tiny", 8).append(text_keys(["a"]), vectors(1))
    other = VectorCache(tmp_path / "model", memory, "other", 8)
    assert read_all(other, text_keys(["a"])) == {}
    other.append(text_keys(["b"]), vectors(1))
    assert other.records() == 1
    other.path.write_bytes(b"garbage")
    assert read_all(other, text_keys(["b"])) == {}
    other.append(text_keys(["c"]), vectors(1))
    assert other.records() == 1 and sorted(read_all(other, text_keys(["c"]))) == [0]


def test_a_cache_another_process_is_making_reads_as_empty_without_a_warning(tmp_path, caplog):
    """Reads take no lock: a reader may open a cache whose maker has created the file but not yet written its
    header. That is a cache with nothing in it yet, not a damaged one."""
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    cache.append(text_keys(["a"]), vectors(1))
    whole = cache.path.read_bytes()
    for made_so_far in (b"", whole[: HEADER // 2]):
        cache.path.write_bytes(made_so_far)
        assert read_all(cache, text_keys(["a"])) == {}
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    cache.path.write_bytes(whole)
    assert sorted(read_all(cache, text_keys(["a"]))) == [0]


def test_pruning_keeps_the_vectors_in_use_alone_and_sweeps_leftovers(tmp_path):
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    texts = [f"fact {n}" for n in range(3000)]
    made = vectors(3000)
    cache.append(text_keys(texts), made)
    assert cache.should_prune(used=100) and not cache.should_prune(used=3000)
    leftover = cache.path.with_name(f".{cache.path.name}.0123456789abcdef.tmp")  # a killed rewrite's
    leftover.write_bytes(b"\0" * 100)
    kept = text_keys(texts[:100])
    cache.rewrite(kept, [made[:60], made[60:100]])
    assert cache.records() == 100 and not leftover.exists()
    found = read_all(cache, text_keys(texts[:150]))
    assert sorted(found) == list(range(100)) and found[99].tobytes() == made[99].tobytes()


def test_vectors_wait_while_another_process_holds_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_cache, "LOCK_TIMEOUT", 0.1)
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    cache.append(text_keys(["a"]), vectors(1))
    with filelock.FileLock(f"{cache.path}.lock"):  # another server appending right now
        cache.append(text_keys(["b"]), vectors(2)[1:])
        assert cache.records() == 1
    cache.append(text_keys([]), vectors(0))
    assert cache.records() == 2


def test_a_cache_that_cannot_be_written_says_so_once(tmp_path, caplog):
    """A cache folder that cannot be made (here a file stands where it should be) warns once, not at every batch
    a memory read whole appends; the vectors wait, and search goes on."""
    (tmp_path / "model").write_text("not a folder")
    cache = VectorCache(tmp_path / "model", tmp_path / "memory.jsonl", "tiny", 8)
    for n in range(5):
        cache.append(text_keys([f"fact {n}"]), vectors(1, seed=n))
    cache.rewrite(text_keys(["fact 0"]), [vectors(1)])
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "Could not add" in warnings[0].getMessage(), caplog.text
    assert sum(len(r) for r in cache._waiting) == 5


def test_caches_of_memories_long_gone_and_the_old_shared_cache_are_deleted(tmp_path, monkeypatch):
    import os

    folder = tmp_path / "model"
    gone = VectorCache(folder, tmp_path / "deleted.jsonl", "tiny", 8)
    gone.append(text_keys(["a"]), vectors(1))
    os.utime(gone.path, (1, 1))  # untouched for decades
    recent = VectorCache(folder, tmp_path / "moved.jsonl", "tiny", 8)
    recent.append(text_keys(["a"]), vectors(1))
    (tmp_path / "0123abcd.npz").write_bytes(b"an old float16 cache of every memory")
    monkeypatch.setattr(vector_cache, "_swept", set())
    VectorCache(folder, tmp_path / "new.jsonl", "tiny", 8).append(text_keys(["b"]), vectors(1))
    assert not gone.path.exists() and recent.path.exists() and not (tmp_path / "0123abcd.npz").exists()
