"""Document vectors by row, in blocks: growing adds a block and never copies the vectors already there.

A vector is kept as its first component, in float32, and the others as int8 scaled by a power of two of the row's
own (the smallest that holds their largest in 127 steps): about a quarter of the memory of float32, and a quarter of
the bytes a query reads. A search's dot products are bound by memory bandwidth (1M documents of 256 dimensions: 1 GB
of float32 a query), so reading int8 into a small float32 buffer, a chunk at a time, and multiplying there is about
1.5x as fast. The first component stays whole because a static model's vectors are ordered by variance and the first
carries their shared direction (0.85 of a unit vector, against 0.1 for the others): scaled with the rest, it would
leave them a few steps each. A cosine moves by 0.0003 on average (at most ~0.003). A power of two makes the stored
vector exact in float32: a vector taken out and put back (moved to another row, written to the vector cache and read
again) is quantised to the same bytes, so an index never drifts.

A row's dot product with the query must not depend on where the row is, or an index updated change by change would
rank differently from one built from scratch. BLAS computes a matrix-vector product a few rows at a time and the
last rows of a matrix, when they do not fill a group, by another kernel that sums in another order (measured on
OpenBLAS: rows in full groups of 4 agree to the bit wherever they are; the others do not). So every block and every
chunk holds a multiple of GROUP rows (the unused ones are zeros) and is multiplied whole: each row goes through the
same kernel. BLAS runs on one thread (as the server sets it): a threaded product would split the rows elsewhere.
A large product is split here instead, by whole chunks among a few threads (numpy lets go of the GIL while it
converts and multiplies): a row's kernel is the same whoever computes it. Read as int8, a product is bound by
compute, not bandwidth (1M rows on one core: 44 ms to convert, 28 ms to multiply), so a second core helps only when
it is free (~70 to ~40 ms).

A large memory's search needs few whole products (memory_server.cosines): `scan` reads the first HEAD int8
components of each row, kept again contiguous (a strided slice converts 9x as slowly), and bounds the rest by the
norms (Cauchy-Schwarz); `dot_rows` then reads whole only the rows that may pass. The rows also keep the exact sums
that give the mean and spread of a query's products (memory_server.moments).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from memory_server.lazy import lazy_module
from memory_server.moments import Moments

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


GROUP = 16  # rows: a multiple of every row group the BLAS kernels use
GROWTH = 4  # a new block holds at least a quarter of the rows so far
CHUNK = 2048  # rows converted to float32 at a time for a dot product (2 MB at 256 dimensions: stays in cache)
STEPS = 127  # the largest int8 magnitude
SMALLEST_EXPONENT = -126  # of a scale: float32's smallest normal power of two
THREADS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
PARALLEL_ROWS = 8 * CHUNK  # a product of fewer rows stays on the caller's thread: a thread costs more than it saves
SCAN_CHUNK = 4 * CHUNK  # rows a scan bounds at a time: as many bytes as a chunk of `dot`, and a quarter of the
# steps (each costs ~10 µs of numpy calls besides the work: 60% of a scan in chunks of CHUNK rows)
HEAD = 64  # int8 components a scan reads (see `scan`): the first, of the most variance (half of it, bundled model)
SCAN_MARGIN = 1e-4  # added to a scan's bound: far above float32's rounding of a 256-term dot product
_threads: ThreadPoolExecutor | None = None


class VectorRows:
    def __init__(self, dim: int, rows: int = 0) -> None:
        self.dim = dim
        self._heads: list[np.ndarray] = []  # float32 (rows,): the first component of each vector
        self._blocks: list[np.ndarray] = []  # int8 (rows, dim - 1): the others, in steps of the row's scale
        self._scales: list[np.ndarray] = []  # float32 (rows,)
        # int8 (rows, HEAD): the first of `_blocks`' columns again, contiguous; made at the first scan (only a large
        # memory scans), then kept with every change
        self._prefixes: list[np.ndarray] | None = None
        self._tails: list[np.ndarray] = []  # float32 (rows,): at least the norm of each row's components past HEAD
        self._live: list[np.ndarray] = []  # bool (rows,): the row holds a vector counted in `moments`
        self._starts: list[int] = []
        self.capacity = 0
        self._moments: Moments | None = None  # of the live rows, made when first asked for
        self.reserve(rows)

    def reserve(self, rows: int) -> None:
        """Make room for rows up to `rows` (exclusive)."""
        if rows <= self.capacity:
            return
        size = _round_up(max(rows - self.capacity, self.capacity // GROWTH, GROUP))
        self._heads.append(np.zeros(size, dtype=np.float32))  # zero pages cost nothing until written
        self._blocks.append(np.zeros((size, self.dim - 1), dtype=np.int8))
        self._scales.append(np.zeros(size, dtype=np.float32))
        if self._prefixes is not None:
            self._prefixes.append(np.zeros((size, min(HEAD, self.dim - 1)), dtype=np.int8))
        self._tails.append(np.zeros(size, dtype=np.float32))
        self._live.append(np.zeros(size, dtype=bool))
        self._starts.append(self.capacity)
        self.capacity += size

    def put(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Store `vectors[i]` in row `rows[i]`; the row is live."""
        if not len(rows):
            return
        self.forget(rows)
        self.reserve(int(rows.max()) + 1)
        vectors = np.asarray(vectors, dtype=np.float32)
        values, scales = _quantised(vectors[:, 1:])
        tails = _tail_norms(values, scales)
        for number, at, inside in self._places(rows):
            self._heads[number][at], self._blocks[number][at] = vectors[inside, 0], values[inside]
            if self._prefixes is not None:
                self._prefixes[number][at] = values[inside, :HEAD]
            self._scales[number][at], self._tails[number][at] = scales[inside], tails[inside]
            self._live[number][at] = True
        if self._moments is not None:
            self._moments.add(vectors[:, 0], values, scales)

    def forget(self, rows: np.ndarray) -> None:
        """The vectors in `rows` are no longer the index's (their documents are gone): no longer counted in
        `moments`. Rows never put are ignored."""
        for number, at, _ in self._places(rows):
            at = at[self._live[number][at]]
            self._live[number][at] = False
            if self._moments is not None:
                self._moments.add(self._heads[number][at], self._blocks[number][at], self._scales[number][at], -1)

    @property
    def moments(self) -> Moments:
        """The sums of the live rows' vectors (memory_server.moments). Made at the first call, then kept with
        every change: only a large memory's search asks for them (about 0.3 s per 100,000 rows)."""
        if self._moments is None:
            self._moments = Moments(self.dim)
            for live, heads, blocks, scales in zip(self._live, self._heads, self._blocks, self._scales):
                for start in range(0, len(live), 16 * CHUNK):
                    at = start + np.flatnonzero(live[start : start + 16 * CHUNK])
                    self._moments.add(heads[at], blocks[at], scales[at])
        return self._moments

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

    def dot_rows(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The dot product of each of `rows` with `vector`: the same bits as `dot` gives them (each row is
        multiplied in a whole group of a chunk, as there). The rows are gathered a chunk at a time, each copied
        whole, then converted and multiplied as in `dot`: a row costs 2.4 to 3x a row of `dot` (cosines.py)."""
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        out = np.empty(_round_up(len(rows)), dtype=np.float32)
        pieces = [(begin, min(begin + CHUNK, len(rows))) for begin in range(0, len(rows), CHUNK)]
        runs = THREADS if len(rows) >= PARALLEL_ROWS else 1
        self._in_parallel(self._dot_gathered, runs, pieces, vector, rows, out)
        return out[: len(rows)]

    def _dot_gathered(
        self, pieces: list[tuple[int, int]], vector: np.ndarray, rows: np.ndarray, out: np.ndarray
    ) -> None:
        first, rest = vector[0], np.ascontiguousarray(vector[1:])
        steps = np.empty((CHUNK, self.dim - 1), dtype=np.int8)
        buffer = np.empty((CHUNK, self.dim - 1), dtype=np.float32)
        heads, scales = np.empty(CHUNK, dtype=np.float32), np.empty(CHUNK, dtype=np.float32)
        for begin, end in pieces:
            count, whole = end - begin, _round_up(end - begin)
            steps[count:whole], heads[count:whole], scales[count:whole] = 0, 0.0, 0.0  # a last group's padding
            for number, at, inside in self._places(rows[begin:end]):
                if len(at) == count:  # all in one block: taken whole rows at a time, twice as fast as a fancy index
                    np.take(_whole_rows(self._blocks[number]), at, out=_whole_rows(steps)[:count])
                    np.take(self._heads[number], at, out=heads[:count])
                    np.take(self._scales[number], at, out=scales[:count])
                    continue
                places = np.flatnonzero(inside)
                steps[places], heads[places], scales[places] = (
                    self._blocks[number][at],
                    self._heads[number][at],
                    self._scales[number][at],
                )
            part, done = buffer[:whole], out[begin : begin + whole]
            np.copyto(part, steps[:whole], casting="unsafe")
            np.matmul(part, rest, out=done)
            done *= scales[:whole]
            done += heads[:whole] * first

    def scan(self, vector: np.ndarray, rows: int, floor: float, most: int) -> np.ndarray | None:
        """The rows among the first `rows` whose dot product with `vector` (a unit vector) may reach `floor`: those
        whose product over the first component and the next HEAD, plus a bound on the rest (Cauchy-Schwarz: the
        norm of the rest of the row times the rest of the vector's), does. A quarter of the reading of `dot`, and
        at a high floor a few rows to read whole (`dot_rows`). None once more than `most` rows pass: the caller
        is better served by `dot`, and the scan stops there."""
        if self._prefixes is None:
            self._prefixes = [np.ascontiguousarray(block[:, :HEAD]) for block in self._blocks]
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        rest = float(np.linalg.norm(vector[HEAD + 1 :].astype(np.float64)))
        chunks = list(self._chunks(rows, SCAN_CHUNK))
        runs = THREADS if rows >= PARALLEL_ROWS else 1
        found = self._in_parallel(self._scan_chunks, runs, chunks, vector, rest, floor - SCAN_MARGIN, most // runs)
        if any(part is None for part in found):
            return None
        passed = np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
        return passed[passed < rows]

    def _scan_chunks(
        self, chunks: list[tuple[int, int, int]], vector: np.ndarray, rest: float, floor: float, most: int
    ) -> list[np.ndarray | None]:
        first, head = vector[0], np.ascontiguousarray(vector[1 : HEAD + 1])
        buffer = np.empty((SCAN_CHUNK, len(head)), dtype=np.float32)
        found: list[np.ndarray | None] = []
        count = 0
        for number, begin, end in chunks:
            part, start = buffer[: end - begin], self._starts[number]
            np.copyto(part, self._prefixes[number][begin:end], casting="unsafe")  # contiguous: 9x as fast as a slice
            bound = part @ head
            bound *= self._scales[number][begin:end]
            bound += self._heads[number][begin:end] * first
            bound += self._tails[number][begin:end] * rest
            found.append(np.flatnonzero(bound >= floor) + (start + begin))
            count += len(found[-1])
            if count > most:
                return [None]
        return found

    def dot(self, vector: np.ndarray, rows: int) -> np.ndarray:
        """The dot product of each of the first `rows` rows with `vector`, in a new array."""
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        out = np.empty(self.capacity, dtype=np.float32)
        chunks = list(self._chunks(rows))
        runs = THREADS if rows >= PARALLEL_ROWS else 1
        self._in_parallel(self._dot_chunks, runs, chunks, vector, out)
        return out[:rows]

    @staticmethod
    def _in_parallel(work: Callable[..., list[Any] | None], runs: int, chunks: list, *arguments: Any) -> list[Any]:
        """`work(chunks, *arguments)` on `runs` threads, each a share of whole chunks; what they return, joined."""
        if runs == 1:
            return work(chunks, *arguments) or []
        jobs, done = [], []
        for n in range(runs):
            try:
                jobs.append(_pool().submit(work, chunks[n::runs], *arguments))
            except RuntimeError:  # the interpreter is exiting: its pool takes no more work, so the caller does it
                done += work(chunks[n::runs], *arguments) or []
        for job in jobs:
            done += job.result() or []
        return done

    def _chunks(self, rows: int, size: int = CHUNK) -> Iterator[tuple[int, int, int]]:
        """(block, begin, end) of each chunk of `size` rows holding the first `rows` rows, in whole groups: the
        same kernel for every row."""
        for number, (block, start) in enumerate(zip(self._blocks, self._starts)):
            if start >= rows:
                break
            used = min(len(block), _round_up(rows - start))
            for begin in range(0, used, size):
                yield number, begin, min(begin + size, used)

    def _dot_chunks(self, chunks: list[tuple[int, int, int]], vector: np.ndarray, out: np.ndarray) -> None:
        first, rest = vector[0], np.ascontiguousarray(vector[1:])
        buffer = np.empty((CHUNK, self.dim - 1), dtype=np.float32)
        for number, begin, end in chunks:
            part, start = buffer[: end - begin], self._starts[number]
            np.copyto(part, self._blocks[number][begin:end], casting="unsafe")
            done = out[start + begin : start + end]
            np.matmul(part, rest, out=done)
            done *= self._scales[number][begin:end]
            done += self._heads[number][begin:end] * first

    @property
    def nbytes(self) -> int:
        prefix = min(HEAD, self.dim - 1) if self._prefixes is not None else 0
        return self.capacity * (self.dim - 1 + prefix + 13)


def _tail_norms(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The norm of each row's components past HEAD, rounded up: a bound on their dot product with a unit vector."""
    tails = np.sqrt(np.square(values[:, HEAD:], dtype=np.float64).sum(axis=1)) * scales
    return np.nextafter(tails.astype(np.float32), np.float32(np.inf))


def _quantised(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and a power-of-two scale per vector (see the module's docstring); a zero vector scales by 1."""
    largest = np.abs(vectors).max(axis=1) if vectors.size else np.zeros(len(vectors), dtype=np.float32)
    with np.errstate(divide="ignore"):
        exponents = np.where(largest > 0, np.ceil(np.log2(largest / STEPS)), 0.0)
    np.maximum(exponents, SMALLEST_EXPONENT, out=exponents)  # components under float32's normal range round to 0
    scales = np.exp2(exponents).astype(np.float32)
    values = np.clip(np.rint(vectors / scales[:, None]), -STEPS, STEPS).astype(np.int8)
    return values, scales


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


def _whole_rows(block: np.ndarray) -> np.ndarray:
    """A block's rows as single items (numpy copies each with one move: `take` on them copies rows 2x as fast)."""
    return block.view(np.dtype((np.void, block.shape[1]))).reshape(len(block))


def _round_up(rows: int) -> int:
    return -(-rows // GROUP) * GROUP
