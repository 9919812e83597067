"""The embedder, its disk cache and its fallbacks. Most tests use a tiny model made here (no download, as in
model2vec's own tests); one uses the real bundled model."""

import numpy as np
import pytest
from model2vec import StaticModel
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from memory_server.embeddings import BUNDLED_NAME, Embedder, EmbedderSlot, load_embedder

WORDS = ["[UNK]", "[PAD]", "cat", "dog", "kitten", "puppy", "car", "truck"]


@pytest.fixture
def tiny_model():
    tokenizer = Tokenizer(WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    vectors = np.array(
        [[0, 0, 0], [0, 0, 0], [1, 0.1, 0], [0.9, 0.3, 0], [1, 0.2, 0], [0.8, 0.4, 0], [0, 0, 1], [0.1, 0, 0.9]],
        dtype=np.float32,
    )
    return StaticModel(vectors, tokenizer, normalize=True)


class Counting:
    """Wraps a model to count the texts it is asked to encode."""

    def __init__(self, model):
        self.model, self.dim, self.embedding, self.seen = model, model.dim, model.embedding, []

    def encode(self, texts, **options):
        self.seen.extend(texts)
        return self.model.encode(texts, **options)


def test_vectors_are_normalised_and_similar_words_are_close(tiny_model):
    embedder = Embedder(tiny_model, "tiny")
    cat, kitten, truck = embedder.encode(["cat", "kitten", "truck"])
    assert np.isclose(np.linalg.norm(cat), 1.0, atol=1e-3)
    assert cat @ kitten > 0.9 > cat @ truck
    assert embedder.encode([]).shape == (0, 3)


def test_a_text_is_embedded_once_even_across_restarts(tiny_model, tmp_path):
    model = Counting(tiny_model)
    first = Embedder(model, "tiny", cache_dir=tmp_path / "vectors")
    first.encode(["cat", "dog"])
    first.encode(["dog", "car"])
    assert model.seen == ["cat", "dog", "car"]
    first.save()
    model.seen.clear()
    second = Embedder(model, "tiny", cache_dir=tmp_path / "vectors")
    vectors = second.encode(["car", "cat", "truck"])
    assert model.seen == ["truck"]
    assert np.allclose(vectors[1], first.encode(["cat"])[0], atol=1e-3)  # stored as float16


def test_a_corrupt_cache_is_rebuilt_not_fatal(tiny_model, tmp_path):
    embedder = Embedder(tiny_model, "tiny", cache_dir=tmp_path / "vectors")
    embedder.encode(["cat"])
    embedder.save()
    [cache] = (tmp_path / "vectors").glob("*.npz")
    cache.write_bytes(b"\x00garbage")
    model = Counting(tiny_model)
    again = Embedder(model, "tiny", cache_dir=tmp_path / "vectors")
    assert again.encode(["cat"]).shape == (1, 3)
    assert model.seen == ["cat"]
    again.save()
    assert len(Embedder(tiny_model, "tiny", cache_dir=tmp_path / "vectors")._memo) == 1  # rewritten, readable again


def test_a_changed_model_does_not_reuse_old_vectors(tiny_model, tmp_path):
    Embedder(tiny_model, "tiny", cache_dir=tmp_path / "vectors").encode(["cat"])
    other = StaticModel(tiny_model.embedding[:, ::-1].copy(), tiny_model.tokenizer, normalize=True)
    first = Embedder(tiny_model, "tiny", cache_dir=tmp_path / "vectors")
    first.encode(["cat"])
    first.save()
    assert Embedder(other, "tiny", cache_dir=tmp_path / "vectors")._memo == {}


def test_punctuation_only_text_gives_a_zero_vector_not_nan(tiny_model):
    vector = Embedder(tiny_model, "tiny").encode_query("!!!")
    assert not np.isnan(vector).any()


def test_the_bundled_model_loads_offline_and_understands_paraphrases():
    embedder, note = load_embedder(None, cache_dir=None)
    assert note is None and embedder.name == BUNDLED_NAME and embedder.dim == 256
    hiking, chess = embedder.encode(["Ann: likes hiking in the mountains", "Bob: plays chess every evening"])
    query = embedder.encode_query("who enjoys walking outdoors?")
    assert query @ hiking > query @ chess


def test_related_words_come_from_the_models_own_vocabulary(tiny_model):
    embedder, _ = load_embedder(None, cache_dir=None)
    near = dict(embedder.related_words("husband"))
    assert {"wife", "married", "spouse"} <= set(near) and all(0.3 <= s < 1 for s in near.values())
    assert "husband" not in near and "teacher" not in near
    assert embedder.related_words("qwzxv") == ()  # pieced together from fragments: no neighbours
    assert Embedder(tiny_model, "tiny").related_words("cat") == ()  # too few whole words to tell


def test_a_model_that_cannot_be_loaded_falls_back_to_the_bundled_one(tmp_path):
    embedder, note = load_embedder(str(tmp_path / "no-such-model"), cache_dir=None)
    assert embedder.name == BUNDLED_NAME
    assert "could not load the embedding model" in note and "no-such-model" in note


def test_none_turns_semantic_search_off():
    embedder, note = load_embedder("none", cache_dir=None)
    assert embedder is None and "semantic search is off" in note


def test_the_slot_loads_in_the_background():
    slot = EmbedderSlot("none")
    slot.start()
    embedder, note = slot.get(wait=30)
    assert embedder is None and "off" in note


def test_text_with_a_lone_surrogate_can_be_embedded():
    embedder, _ = load_embedder(None, cache_dir=None)
    vectors = embedder.encode(["broken \ud800 text", "fine text"])
    assert vectors.shape == (2, embedder.dim) and not np.isnan(vectors).any()


def test_a_killed_savers_temp_file_is_swept_under_the_cache_lock(tiny_model, tmp_path, monkeypatch):
    """A process killed while saving the vector cache leaves its temporary file (megabytes); the next save removes
    it, holding the lock every saver holds, so a live saver's temporary file is never taken from under it."""
    import filelock

    monkeypatch.setattr("memory_server.embeddings.CACHE_LOCK_TIMEOUT", 0.2)
    folder = tmp_path / "vectors"
    embedder = Embedder(tiny_model, "tiny", cache_dir=folder)
    embedder.encode(["cat"])
    embedder.save()
    [cache] = [p for p in folder.iterdir() if p.suffix == ".npz"]
    leftover = folder / f".{cache.name}.0123456789abcdef.tmp"
    leftover.write_bytes(b"\0" * 1000)
    with filelock.FileLock(f"{cache}.lock"):  # another process is saving right now
        embedder.encode(["dog"])
        embedder.save()  # waits for the lock, gives up, keeps its vectors for the next save
        assert leftover.exists()
    embedder.save()
    assert not leftover.exists()
    assert sorted(p.name for p in folder.iterdir()) == [cache.name, f"{cache.name}.lock"]
    model = Counting(tiny_model)
    Embedder(model, "tiny", cache_dir=folder).encode(["cat", "dog"])
    assert model.seen == []  # both saved, the vector that waited for the lock included


def test_long_encodes_report_progress_in_steps(tiny_model, monkeypatch):
    from memory_server import embeddings

    monkeypatch.setattr(embeddings, "PROGRESS_STEP", 4)
    embedder = Embedder(tiny_model, "tiny")
    reports = []
    embedder.on_progress = lambda done, total: reports.append((done, total))
    texts = [f"cat dog {i}" for i in range(10)]
    vectors = embedder.encode(texts)
    assert reports == [(4, 10), (8, 10), (10, 10)]
    assert np.allclose(vectors, Embedder(tiny_model, "tiny").encode(texts))  # the same vectors in one go
