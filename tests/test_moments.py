"""The mean and variance of a query's cosines from the moments of the stored vectors: what every cosine gives, and
the same bits however the set of vectors was reached."""

import numpy as np
import pytest

from memory_server.moments import EXACT_ROWS
from memory_server.vectors import VectorRows


def model_like(count: int, seed: int) -> np.ndarray:
    """Unit vectors as a static model's: a large shared first component, the others of varied sizes (so several
    exponents of scale), a few far from the rest, one zero vector."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, 256)).astype(np.float32) * rng.uniform(0.02, 0.4, (count, 1))
    vectors[:, 0] = rng.uniform(0.6, 0.95, count)
    vectors[3, 0] = -0.9  # a first component of another sign and exponent
    vectors[5] *= 300
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[9] = 0.0
    return vectors


def test_the_moments_give_the_mean_and_variance_of_every_cosine():
    vectors = model_like(EXACT_ROWS * 3 + 77, seed=1)  # more rows than one exact float32 sum holds
    rows = VectorRows(256, len(vectors))
    rows.put(np.arange(len(vectors)), vectors)
    for query in (vectors[42], vectors[3], model_like(20, seed=2)[1]):
        cosines = rows.dot(query, len(vectors)).astype(np.float64)
        mean, variance = rows.moments.mean_and_variance(query)
        assert mean == pytest.approx(cosines.mean(), abs=1e-6)
        assert variance == pytest.approx(cosines.var(), rel=1e-4)
        assert rows.moments.count == len(vectors)


def test_the_moments_are_the_same_bits_whatever_the_order_of_changes():
    """An index updated change by change must score as one made from scratch: vectors put in another order, moved,
    forgotten and put again leave the same sums."""
    vectors = model_like(3000, seed=3)
    query = vectors[10]
    scratch = VectorRows(256, 2000)
    scratch.put(np.arange(2000), vectors[:2000])
    rng = np.random.default_rng(4)
    changed = VectorRows(256, 0)
    assert changed.moments.count == 0  # asked for first: kept up to date from here, change by change
    order = rng.permutation(3000)
    for part in np.array_split(order, 7):  # every vector, in batches, in another order
        changed.put(part, vectors[part])
    changed.forget(np.arange(2000, 3000))  # then a third gone
    changed.forget(np.arange(2000, 2100))  # forgetting twice counts once
    changed.put(np.arange(500), vectors[:500])  # put again where it already is
    assert changed.moments.count == 2000
    assert changed.moments.mean_and_variance(query) == scratch.moments.mean_and_variance(query)
    made_late = VectorRows(256, 0)  # the same rows, the sums made at the first question
    made_late.put(np.arange(3000), vectors)
    made_late.forget(np.arange(2000, 3000))
    assert made_late.moments.mean_and_variance(query) == scratch.moments.mean_and_variance(query)
    changed.put(np.arange(2000, 2010), vectors[:10])  # ten more vectors: the sums move
    assert changed.moments.mean_and_variance(query) != scratch.moments.mean_and_variance(query)
