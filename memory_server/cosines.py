"""A query's cosines with the documents of an index, as the ranking asks for them.

The ranking (search.py) needs, of all the cosines, only their mean and spread, the documents whose cosine reaches a
floor, and the cosines of a few documents (those sharing a word with the query, the user's). A small index computes
every cosine (a few milliseconds); a large one reads its moments for the mean and spread (moments.py), scans a
quarter of each vector for the documents that may reach a floor (vectors.py), and reads whole only the documents
asked for. A cosine is the same bits either way: only what is computed differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np

    from memory_server.vectors import VectorRows
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

SCAN_FROM = 50_000  # documents: a smaller index computes every cosine
# Asked for the cosines of more than this share of the documents at once, an index computes all. Gathered, a row
# costs 2.4 to 3x a row of the whole pass, and a scan (vectors.py) a third of the pass: an eighth of the documents
# and a scan cost ~0.65 of the pass (measured at 120,000 documents of 256 dimensions).
GATHER_SHARE = 8


class QueryCosines:
    """The cosines of one query with the documents of one state of an index, clipped to [0, 1]."""

    def __init__(
        self,
        vectors: VectorRows,
        vector: np.ndarray,
        rows: np.ndarray | None,
        used: int,
        documents_in: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        """`rows`: the row of each document (None: document d is in row d), `used` rows in all, dead ones included;
        `documents_in`: the documents in some rows, in order (rows of documents gone left out)."""
        size = used if rows is None else len(rows)
        self._vectors, self._vector, self._rows, self.size = vectors, vector, rows, size
        self._documents_in = documents_in
        self._used = used
        self._complete = False  # every cosine known
        self.scanned = size >= SCAN_FROM and vectors.moments.count == size
        if not self.scanned:
            self._every()
            return
        self._values = np.zeros(size, dtype=np.float32)
        self._known = np.zeros(size, dtype=bool)

    def _every(self) -> None:
        """Compute every cosine."""
        if self._complete:
            return
        dots = self._vectors.dot(self._vector, self._used)
        if self._rows is not None:
            dots = dots[self._rows]
        self._values = np.clip(dots, 0.0, 1.0, out=dots)  # a new array either way: clipped where it is
        self._known = np.ones(self.size, dtype=bool)
        self._complete = True

    def sums(self) -> tuple[float, float]:
        """The sum of the cosines and of their squares (in float64; a large index's from its moments, unclipped:
        a static model's cosines are positive)."""
        if not self.scanned:
            values = self._values.astype(np.float64)
            return float(values.sum()), float(values @ values)
        mean, variance = self._vectors.moments.mean_and_variance(self._vector)
        return mean * self.size, (variance + mean * mean) * self.size

    def will_need(self, documents: np.ndarray) -> None:
        """`documents` will be asked for: if they are so many that every cosine will be computed, compute them now
        (a scan would be wasted); if few, wait (a scan may find more to read with them)."""
        if len(documents) > self.size // GATHER_SHARE:
            self._every()

    def at(self, documents: np.ndarray) -> np.ndarray:
        """The cosines of `documents`."""
        if self._complete:
            return self._values[documents]
        unknown = documents[~self._known[documents]]
        if len(unknown) > self.size // GATHER_SHARE:  # many: reading every row costs less than gathering them
            self._every()
        elif len(unknown):
            rows = unknown if self._rows is None else self._rows[unknown]
            self._values[unknown] = np.clip(self._vectors.dot_rows(self._vector, rows), 0.0, 1.0)
            self._known[unknown] = True
        return self._values[documents]

    def reaching(self, floor: float) -> np.ndarray:
        """The documents whose cosine is `floor` or more, in order."""
        if self._complete:
            return np.flatnonzero(self._values >= floor)
        rows = self._vectors.scan(self._vector, self._used, floor, most=self.size // GATHER_SHARE)
        if rows is None:  # the bound lets too many through: read every row
            self._every()
            return np.flatnonzero(self._values >= floor)
        documents = rows if self._rows is None else self._documents_in(rows)
        return documents[self.at(documents) >= floor]
