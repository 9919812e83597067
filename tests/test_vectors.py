"""Document vectors kept as int8 with a power-of-two scale per row: close to float32, a quarter of its size, and
the same bytes however often a vector is moved, cached and read back; a query's products with them exact integers."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_server import vectors as vectors_module
from memory_server.vectors import CHUNK, VectorRows


@pytest.fixture
def unit_vectors():
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((3000, 256)).astype(np.float32)
    vectors[7] *= 40  # a component far larger than the others must not overflow int8
    vectors[11] = 0.0  # an empty text's vector
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def test_products_leave_the_interpreter_as_they_found_it(unit_vectors):
    # SimSIMD's cdist into out= returned None without counting it: each product took one from None's count, and a
    # server aborted after a few thousand searches ("Fatal Python error: none_dealloc", Python 3.10 and 3.11)
    rows = VectorRows(256, len(unit_vectors))
    rows.put(np.arange(len(unit_vectors)), unit_vectors)
    rows.dot(unit_vectors[0], len(unit_vectors))
    before = sys.getrefcount(None)
    for n in range(500):
        rows.dot(unit_vectors[n], len(unit_vectors))
    assert sys.getrefcount(None) >= before - 50  # other threads may hold a few for a moment


def test_dot_products_are_within_a_few_thousandths_of_float32(unit_vectors):
    rows = VectorRows(256, len(unit_vectors))
    rows.put(np.arange(len(unit_vectors)), unit_vectors)
    query = unit_vectors[42]
    exact = unit_vectors @ query
    found = rows.dot(query, len(unit_vectors))
    assert found.shape == (len(unit_vectors),)
    assert np.abs(found - exact).max() < 0.004
    assert found[11] == 0.0 and abs(found[42] - 1.0) < 0.004
    assert np.argmax(found) == 42


def test_a_static_models_shared_direction_leaves_the_other_components_their_steps(unit_vectors):
    """A static model's vectors share one large first component (0.85 of a unit vector): it is kept whole, so the
    small components are not rounded to a few steps of its size."""
    shared = unit_vectors * 0.5
    shared[:, 0] = 0.85
    shared /= np.linalg.norm(shared, axis=1, keepdims=True)
    rows = VectorRows(256, len(shared))
    rows.put(np.arange(len(shared)), shared)
    exact = shared @ shared[42]
    found = rows.dot(shared[42], len(shared))
    assert np.abs(found - exact).max() < 0.002
    assert np.abs(found - exact).mean() < 0.0005
    assert list(np.argsort(-found)[:5]) == list(np.argsort(-exact)[:5])


def test_a_vector_taken_and_put_back_keeps_its_bytes(unit_vectors):
    """Moving rows (an update), or writing vectors to the cache and reading them again, quantises the same way."""
    rows = VectorRows(256, 100)
    rows.put(np.arange(100), unit_vectors[:100])
    again = VectorRows(256, 100)
    again.put(np.arange(100)[::-1], rows.take(np.arange(100))[::-1])
    query = unit_vectors[2000]
    assert np.array_equal(again.take(np.arange(100)), rows.take(np.arange(100)))
    assert np.array_equal(again.dot(query, 100), rows.dot(query, 100))


def test_a_rows_dot_product_does_not_depend_on_where_it_is(unit_vectors):
    """The same vector in a small block, in a later block, and past a chunk's end gives the same bits."""
    rows = VectorRows(256, 5)
    far = CHUNK + 37
    rows.put(np.array([3, 40, far]), np.repeat(unit_vectors[9:10], 3, axis=0))
    scores = rows.dot(unit_vectors[123], far + 1)
    assert scores[3] == scores[40] == scores[far]


def test_the_rows_take_a_quarter_of_float32s_memory():
    rows = VectorRows(256, 10_000)
    assert rows.nbytes < 10_000 * 256 * 4 * 0.26


def test_components_too_small_for_float32_round_to_zero_without_a_warning():
    rows = VectorRows(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows.put(np.array([0, 1]), np.array([[0.5, 1e-44, -1e-45, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=np.float32))
        scores = rows.dot(np.array([1.0, 1.0, 1.0, 1.0], dtype=np.float32), 2)
    assert list(scores) == [0.5, 1.0]


def test_a_large_product_split_among_threads_gives_the_same_bits(unit_vectors, monkeypatch):
    """Past PARALLEL_ROWS the rows are shared among threads: the scores are those of one thread, and a row's score
    is the one it has in a small index."""
    count = vectors_module.PARALLEL_ROWS + 3 * CHUNK + 21  # in two blocks, shared unevenly
    rows = VectorRows(256, count // 2)
    numbers = np.arange(count)
    rows.put(numbers, unit_vectors[numbers % len(unit_vectors)])
    query = unit_vectors[77]
    monkeypatch.setattr(vectors_module, "THREADS", 3)
    shared = rows.dot(query, count)
    monkeypatch.setattr(vectors_module, "THREADS", 1)
    alone = rows.dot(query, count)
    assert np.array_equal(shared, alone)
    last = numbers[-16:]  # in the second block, in its last chunk
    small = VectorRows(256, 16)
    small.put(np.arange(16), unit_vectors[last % len(unit_vectors)])
    assert np.array_equal(shared[last], small.dot(query, 16))
    assert np.abs(shared - unit_vectors[numbers % len(unit_vectors)] @ query).max() < 0.004


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_process_forked_after_a_large_product_can_still_compute_one(unit_vectors, monkeypatch):
    """A forked child holds the parent's pool but none of its threads: a product there must not wait for them."""
    monkeypatch.setattr(vectors_module, "THREADS", 2)
    count = vectors_module.PARALLEL_ROWS
    rows = VectorRows(256, count)
    numbers = np.arange(count)
    rows.put(numbers, unit_vectors[numbers % len(unit_vectors)])
    query = unit_vectors[3]
    expected = rows.dot(query, count)  # the pool and its threads exist from here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns of a fork with threads running
        child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os._exit(0 if np.array_equal(rows.dot(query, count), expected) else 1)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert done[0] == child, "the child's product waited for threads it does not have"
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_a_large_product_while_the_interpreter_exits_is_still_computed(tmp_path):
    """At exit the pool takes no more work (daemon threads and atexit hooks still run): the caller computes it."""
    script = textwrap.dedent(
        """
        import atexit, os
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        import numpy as np
        from memory_server import vectors
        vectors.THREADS = 2
        count = vectors.PARALLEL_ROWS
        rows = vectors.VectorRows(256, count)
        rows.put(np.arange(count), np.full((count, 256), 1 / 16, dtype=np.float32))
        query = np.full(256, 1 / 16, dtype=np.float32)
        expected = rows.dot(query, count)  # the pool and its threads exist from here
        atexit.register(lambda: print("same", np.array_equal(rows.dot(query, count), expected)))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "same True", "")


@settings(max_examples=60, deadline=None)
@given(
    dim=st.sampled_from([2, 9, 66, 256, 1100]),
    count=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    first=st.floats(0.0, 1.0),
    twin=st.booleans(),
)
def test_simsimd_and_numpy_give_the_same_bits(dim, count, seed, first, twin):
    """The products are integers, exact either way: where SimSIMD cannot be imported, numpy's are the same bits,
    whatever the vectors (a large first component or none, zero vectors, the query one of the rows, components
    at int8's extremes, more dimensions than float32 sums exactly)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors[:, 0] *= 1 + 20 * first
    vectors[rng.random(count) < 0.1] = 0.0
    vectors[rng.random(count) < 0.1, 1:] = 1.0  # every step 127
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    query = vectors[rng.integers(count)] if twin else rng.standard_normal(dim).astype(np.float32)
    rows = VectorRows(dim, count)
    rows.put(np.arange(count), vectors)
    assert vectors_module._simsimd() is not None  # a test dependency as much as a runtime one
    fast = rows.dot(query, count)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vectors_module, "_simsimd", lambda: None)
        assert rows.dot(query, count).tobytes() == fast.tobytes()
