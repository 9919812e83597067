"""The embedder, its related words and its fallbacks (the vector caches are tested in test_vector_cache.py). Most
tests use a tiny model made here (no download, as in model2vec's own tests); one uses the real bundled model."""

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


def test_vectors_are_normalised_and_similar_words_are_close(tiny_model):
    embedder = Embedder(tiny_model, "tiny")
    cat, kitten, truck = embedder.encode(["cat", "kitten", "truck"])
    assert np.isclose(np.linalg.norm(cat), 1.0, atol=1e-3)
    assert cat @ kitten > 0.9 > cat @ truck
    assert embedder.encode([]).shape == (0, 3)


def test_a_texts_vector_is_the_same_bits_in_any_batch(tiny_model):
    """An index made change by change must hold the vectors one built at once holds: a vector depends on its
    text alone, never on the batch it was encoded in."""
    embedder = Embedder(tiny_model, "tiny")
    texts = ["cat dog", "kitten", "car truck truck", "puppy cat", "dog"]
    together = embedder.encode(texts)
    for number, text in enumerate(texts):
        assert embedder.encode_batch([text]).tobytes() == together[number].tobytes()
    assert embedder.encode_batch(texts[::-1]).tobytes() == together[::-1].tobytes()
    assert embedder.encoded == 3 * len(texts)


def test_the_bundled_models_vectors_do_not_depend_on_the_batch():
    embedder, _ = load_embedder(None)
    texts = [f"Ann: bought {n} red bicycles on Monday" for n in range(40)] + ["Bob (person)", "x", "Ann: naïve café"]
    together = embedder.encode(texts)
    alone = np.concatenate([embedder.encode_batch([text]) for text in texts])
    assert together.tobytes() == alone.tobytes()


def test_punctuation_only_text_gives_a_zero_vector_not_nan(tiny_model):
    vector = Embedder(tiny_model, "tiny").encode_query("!!!")
    assert not np.isnan(vector).any()


def test_the_bundled_model_loads_offline_and_understands_paraphrases():
    embedder, note = load_embedder(None)
    assert note is None and embedder.name == BUNDLED_NAME and embedder.dim == 256
    hiking, chess = embedder.encode(["Ann: likes hiking in the mountains", "Bob: plays chess every evening"])
    query = embedder.encode_query("who enjoys walking outdoors?")
    assert query @ hiking > query @ chess


def test_related_words_come_from_the_models_own_vocabulary(tiny_model):
    embedder, _ = load_embedder(None)
    near = dict(embedder.related_words("husband"))
    assert {"wife", "married", "spouse"} <= set(near) and all(0.3 <= s < 1 for s in near.values())
    assert "husband" not in near and "teacher" not in near
    assert embedder.related_words("qwzxv") == ()  # pieced together from fragments: no neighbours
    assert Embedder(tiny_model, "tiny").related_words("cat") == ()  # too few whole words to tell


def test_the_model_knows_its_words_and_their_forms_not_fragments():
    embedder, _ = load_embedder(None)
    assert embedder.knows("hobby") and not embedder.knows("hobbies")  # "ho" + "##bbies": its static vector is noise
    assert embedder.knows_form("hobbies")  # yet a form of "hobby", which a transformer reads as one
    assert not any(embedder.knows_form(word) for word in ("asdf", "qwerty", "zxcv"))


def test_a_model_that_cannot_be_loaded_falls_back_to_the_bundled_one(tmp_path):
    embedder, note = load_embedder(str(tmp_path / "no-such-model"))
    assert embedder.name == BUNDLED_NAME
    assert "could not load the embedding model" in note and "no-such-model" in note


def test_none_turns_semantic_search_off():
    embedder, note = load_embedder("none")
    assert embedder is None and "semantic search is off" in note


def test_the_slot_loads_in_the_background():
    slot = EmbedderSlot("none")
    slot.start()
    embedder, note = slot.get(wait=30)
    assert embedder is None and "off" in note


def test_text_with_a_lone_surrogate_can_be_embedded():
    embedder, _ = load_embedder(None)
    vectors = embedder.encode(["broken \ud800 text", "fine text"])
    assert vectors.shape == (2, embedder.dim) and not np.isnan(vectors).any()


def test_long_encodes_report_progress_in_steps(tiny_model, monkeypatch):
    from memory_server import embeddings

    monkeypatch.setattr(embeddings, "BATCH", 4)
    embedder = Embedder(tiny_model, "tiny")
    reports = []
    embedder.on_progress = lambda done, total: reports.append((done, total))
    texts = [f"cat dog {i}" for i in range(10)]
    vectors = embedder.encode(texts)
    assert reports == [(4, 10), (8, 10), (10, 10)]
    assert np.allclose(vectors, Embedder(tiny_model, "tiny").encode(texts))  # the same vectors in one go

