"""Document vectors by row, in blocks: growing adds a block and never copies the vectors already there.

A row's dot product with the query must not depend on where the row is, or an index updated change by change would
rank differently from one built from scratch. BLAS computes a matrix-vector product a few rows at a time and the
last rows of a matrix, when they do not fill a group, by another kernel that sums in another order (measured on
OpenBLAS: rows in full groups of 4 agree to the bit wherever they are; the others do not). So every block holds a
multiple of GROUP rows (the unused ones are zeros) and is multiplied whole: each row goes through the same kernel.
BLAS runs on one thread (as the server sets it): a threaded product would split the rows elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


GROUP = 16  # rows: a multiple of every row group the BLAS kernels use
GROWTH = 4  # a new block holds at least a quarter of the rows so far


class VectorRows:
    def __init__(self, dim: int, rows: int = 0) -> None:
        self.dim = dim
        self._blocks: list[np.ndarray] = []
        self._starts: list[int] = []
        self.capacity = 0
        self.reserve(rows)

    def reserve(self, rows: int) -> None:
        """Make room for rows up to `rows` (exclusive)."""
        if rows <= self.capacity:
            return
        size = _round_up(max(rows - self.capacity, self.capacity // GROWTH, GROUP))
        self._blocks.append(np.zeros((size, self.dim), dtype=np.float32))  # zero pages cost nothing until written
        self._starts.append(self.capacity)
        self.capacity += size

    def put(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Store `vectors[i]` in row `rows[i]`."""
        if not len(rows):
            return
        self.reserve(int(rows.max()) + 1)
        for block, start in zip(self._blocks, self._starts):
            inside = (rows >= start) & (rows < start + len(block))
            if inside.all():
                block[rows - start] = vectors
                return
            if inside.any():
                block[rows[inside] - start] = vectors[inside]

    def take(self, rows: np.ndarray) -> np.ndarray:
        """A copy of the vectors in `rows`."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for block, start in zip(self._blocks, self._starts):
            inside = (rows >= start) & (rows < start + len(block))
            if inside.any():
                out[inside] = block[rows[inside] - start]
        return out

    def dot(self, vector: np.ndarray, rows: int) -> np.ndarray:
        """The dot product of each of the first `rows` rows with `vector`, in a new array."""
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        out = np.empty(self.capacity, dtype=np.float32)
        for block, start in zip(self._blocks, self._starts):
            if start >= rows:
                break
            used = min(len(block), _round_up(rows - start))  # whole groups still: the same kernel for every row
            np.matmul(block[:used], vector, out=out[start : start + used])
        return out[:rows]

    @property
    def nbytes(self) -> int:
        return self.capacity * self.dim * 4


def _round_up(rows: int) -> int:
    return -(-rows // GROUP) * GROUP
