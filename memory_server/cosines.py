"""A query's cosines with the documents of an index, as the ranking asks for them.

The ranking (search.py) needs, of all the cosines, only their mean and spread, the documents whose cosine reaches a
floor, and the cosines of a few documents (those sharing a word with the query, the user's). A small index computes
every cosine (a few milliseconds); a large one reads its moments for the mean and spread (moments.py), scans a
quarter of each vector for the documents that may reach a floor (vectors.py), and reads whole only the documents
asked for. A cosine is the same bits either way: only what is computed differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np

    from memory_server.vectors import VectorRows
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

SCAN_FROM = 50_000  # documents: a smaller index computes every cosine


class QueryCosines:
    """The cosines of one query with the documents of one state of an index, clipped to [0, 1]."""

    def __init__(
        self, vectors: VectorRows, vector: np.ndarray, rows: np.ndarray | None, used: int, size: int
    ) -> None:
        self._vectors, self._vector, self._rows, self.size = vectors, vector, rows, size
        self._values = np.zeros(size, dtype=np.float32)
        self._known = np.zeros(size, dtype=bool)
        self._documents: np.ndarray | None = None
        self.scanned = size >= SCAN_FROM and vectors.moments.count == size
        if not self.scanned:  # every cosine, now
            dots = vectors.dot(vector, used)
            self._values = np.clip(dots if rows is None else dots[rows], 0.0, 1.0)
            self._known[:] = True
        self._used = used

    def sums(self) -> tuple[float, float]:
        """The sum of the cosines and of their squares (in float64; a large index's from its moments, unclipped:
        a static model's cosines are positive)."""
        if not self.scanned:
            values = self._values.astype(np.float64)
            return float(values.sum()), float(values @ values)
        mean, variance = self._vectors.moments.mean_and_variance(self._vector)
        return mean * self.size, (variance + mean * mean) * self.size

    def at(self, documents: np.ndarray) -> np.ndarray:
        """The cosines of `documents`."""
        unknown = documents[~self._known[documents]]
        if len(unknown):
            rows = unknown if self._rows is None else self._rows[unknown]
            self._values[unknown] = np.clip(self._vectors.dot_rows(self._vector, rows), 0.0, 1.0)
            self._known[unknown] = True
        return self._values[documents]

    def reaching(self, floor: float) -> np.ndarray:
        """The documents whose cosine is `floor` or more, in order."""
        if not self.scanned:
            return np.flatnonzero(self._values >= floor)
        rows = self._vectors.scan(self._vector, self._used, floor)
        documents = rows if self._rows is None else self._documents_of(rows)
        return documents[self.at(documents) >= floor]

    def _documents_of(self, rows: np.ndarray) -> np.ndarray:
        """The documents in `rows`, in order (rows of documents gone are left out)."""
        assert self._rows is not None
        found = np.full(self._used, -1, dtype=np.int64)
        found[self._rows] = np.arange(self.size)
        documents = found[rows]
        return np.sort(documents[documents >= 0])
