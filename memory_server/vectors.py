"""Document vectors by row, in blocks: growing adds a block and never copies the vectors already there.

A vector is kept as its first component, in float32, and the others as int8 scaled by a power of two of the row's
own (the smallest that holds their largest in 127 steps): about a quarter of the memory of float32. The first
component stays whole because a static model's vectors are ordered by variance and the first carries their shared
direction (0.85 of a unit vector, against 0.1 for the others): scaled with the rest, it would leave them a few steps
each. A power of two makes the stored vector exact in float32: a vector taken out and put back (moved to another
row, written to the vector cache and read again) is quantised to the same bytes, so an index never drifts.

A query is kept the same way, so its cosine with a row is q0·f + 2^(e+e')·(j·k), with j·k a dot product of int8
steps: an integer, computed exactly by SimSIMD's int8 kernels (numpy has no int8 product: converting the rows to
float32 first cost 4x as much, 5.7 ms against 1.3 ms for 120,000 rows of 256 dimensions on one core). A cosine moves
by 0.0003 on average (at most ~0.004) from float32's. Being exact, a row's product is the same bits wherever the row
is, whichever thread or instruction set computed it: an index updated change by change ranks as one built from
scratch. Where SimSIMD cannot be imported, numpy multiplies the steps in float64, also exactly: the same bits.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


GROWTH = 4  # a new block holds at least a quarter of the rows so far
CHUNK = 2048  # rows converted at a time where numpy multiplies (4 MB of float64 at 256 dimensions)
STEPS = 127  # the largest int8 magnitude
SMALLEST_EXPONENT = -126  # of a scale: float32's smallest normal power of two
THREADS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
PARALLEL_ROWS = 16 * CHUNK  # a product of fewer rows stays on the caller's thread: a thread costs more than it saves
_threads: ThreadPoolExecutor | None = None


class VectorRows:
    def __init__(self, dim: int, rows: int = 0) -> None:
        self.dim = dim
        self._heads: list[np.ndarray] = []  # float32 (rows,): the first component of each vector
        self._blocks: list[np.ndarray] = []  # int8 (rows, dim - 1): the others, in steps of the row's scale
        self._scales: list[np.ndarray] = []  # float32 (rows,)
        self._starts: list[int] = []
        self.capacity = 0
        self.reserve(rows)

    def reserve(self, rows: int) -> None:
        """Make room for rows up to `rows` (exclusive)."""
        if rows <= self.capacity:
            return
        size = max(rows - self.capacity, self.capacity // GROWTH, 16)
        self._heads.append(np.zeros(size, dtype=np.float32))  # zero pages cost nothing until written
        self._blocks.append(np.zeros((size, self.dim - 1), dtype=np.int8))
        self._scales.append(np.zeros(size, dtype=np.float32))
        self._starts.append(self.capacity)
        self.capacity += size

    def put(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Store `vectors[i]` in row `rows[i]`."""
        if not len(rows):
            return
        self.reserve(int(rows.max()) + 1)
        vectors = np.asarray(vectors, dtype=np.float32)
        values, scales = _quantised(vectors[:, 1:])
        for number, at, inside in self._places(rows):
            self._heads[number][at], self._blocks[number][at] = vectors[inside, 0], values[inside]
            self._scales[number][at] = scales[inside]

    def _places(self, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """For each block holding some of `rows`: its number, their places in it, and which of `rows` they are."""
        for number, (block, start) in enumerate(zip(self._blocks, self._starts)):
            inside = (rows >= start) & (rows < start + len(block))
            if inside.any():
                yield number, rows[inside] - start, inside

    def take(self, rows: np.ndarray) -> np.ndarray:
        """A copy of the vectors in `rows`, as float32."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for number, at, inside in self._places(rows):
            out[inside, 0] = self._heads[number][at]
            out[inside, 1:] = self._blocks[number][at] * self._scales[number][at, None]
        return out

    def dot(self, vector: np.ndarray, rows: int) -> np.ndarray:
        """The dot product of each of the first `rows` rows with `vector`, in a new array."""
        vector = np.asarray(vector, dtype=np.float32)
        steps, scale = _quantised(vector[None, 1:])
        query = (vector[0], steps[0], scale[0])
        out = np.empty(rows, dtype=np.float32)
        pieces = list(self._pieces(rows))
        jobs = []
        for piece in pieces[1:]:
            try:
                jobs.append(_pool().submit(self._dot_piece, query, *piece, out))
            except RuntimeError:  # the interpreter is exiting: its pool takes no more work, so the caller does it
                self._dot_piece(query, *piece, out)
        if pieces:
            self._dot_piece(query, *pieces[0], out)
        for job in jobs:
            job.result()
        return out

    def _pieces(self, rows: int) -> Iterator[tuple[int, int, int]]:
        """(block, begin, end) of the parts of the first `rows` rows computed apart: a large product is shared
        among THREADS threads (numpy and SimSIMD let go of the GIL)."""
        share = -(-rows // THREADS) if rows >= PARALLEL_ROWS else max(rows, 1)
        for number, (block, start) in enumerate(zip(self._blocks, self._starts)):
            used = min(len(block), rows - start)
            for begin in range(0, max(used, 0), share):
                yield number, begin, min(begin + share, used)

    def _dot_piece(
        self, query: tuple[np.float32, np.ndarray, np.float32], number: int, begin: int, end: int, out: np.ndarray
    ) -> None:
        """The products of the query (first component, int8 steps, scale) with rows `begin` to `end` of block
        `number`, into `out`."""
        first, steps, scale = query
        block, start = self._blocks[number][begin:end], self._starts[number]
        done = out[start + begin : start + end]
        if _simsimd() is not None:
            # Not into `out=`: SimSIMD 6.5 then returns None without counting the reference, and a long-running
            # server's None count falls by one per call until the interpreter aborts ("deallocating None", Python
            # 3.10 and 3.11, where None is not immortal)
            done[:] = np.asarray(_simsimd().cdist(steps[None], block, metric="dot", out_dtype="float32"))[0]
        else:
            wide = steps.astype(np.float64)
            for at in range(0, end - begin, CHUNK):
                done[at : at + CHUNK] = block[at : at + CHUNK].astype(np.float64) @ wide
        done *= self._scales[number][begin:end]
        done *= scale  # a power of two: exact
        done += self._heads[number][begin:end] * first

    @property
    def nbytes(self) -> int:
        return self.capacity * (self.dim - 1 + 8)


def _quantised(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and a power-of-two scale per vector (see the module's docstring); a zero vector scales by 1."""
    largest = np.abs(vectors).max(axis=1) if vectors.size else np.zeros(len(vectors), dtype=np.float32)
    with np.errstate(divide="ignore"):
        exponents = np.where(largest > 0, np.ceil(np.log2(largest / STEPS)), 0.0)
    np.maximum(exponents, SMALLEST_EXPONENT, out=exponents)  # components under float32's normal range round to 0
    scales = np.exp2(exponents).astype(np.float32)
    values = np.clip(np.rint(vectors / scales[:, None]), -STEPS, STEPS).astype(np.int8)
    return values, scales


@functools.cache
def _simsimd() -> ModuleType | None:
    """SimSIMD, imported at the first product (not at start-up); None where it cannot be (no wheel for this
    platform): numpy then computes the same bits, more slowly."""
    try:
        import simsimd
    except ImportError:
        return None
    return simsimd


def _pool() -> ThreadPoolExecutor:
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(THREADS, thread_name_prefix="dot")
    return _threads


def _forget_threads() -> None:
    """In a forked child: the pool's threads stayed in the parent, and work queued for them would wait forever."""
    global _threads
    _threads = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)
