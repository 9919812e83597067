"""The mean and variance of a query's cosines with every stored vector, without reading the vectors.

A search's cut-offs need the query's usual cosine and its spread over all the documents of a memory (search.py):
at a million documents, reading every vector. The sums that give both, of the vectors and of their outer products,
do not depend on the query: kept as vectors come and go, they give the mean and variance in O(d²).

They are kept exactly, in integers, so they are the same bits however the set of vectors was reached (made at once
or one change at a time, in any order): an index updated change by change must score as one made from scratch
(index.py). A stored vector (vectors.py) is a first component f, in float32, and int8 steps k of a power-of-two
scale 2^e. Written f = m·2^(x-24), m an integer of 24 bits, its cosine with a query (q0, r) is q0·f + 2^e·(r·k), so

    Σ cos  = q0 Σ_x 2^(x-24) Σm  +  Σ_e 2^e r·Σk
    Σ cos² = q0² Σ_x 2^(2x-48) Σm²  +  2 q0 Σ_(x,e) 2^(x-24+e) r·Σ(m k)  +  Σ_e 2^(2e) rᵀ Σ(k kᵀ) r

with each sum taken over the vectors of that exponent (a few distinct ones). Σ(k kᵀ) is summed by BLAS in float32,
EXACT_ROWS rows at a time: every partial sum is then an integer under 2^24, exact in any order; Σ(m k) likewise in
float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

EXACT_ROWS = 1024  # rows whose k kᵀ sum stays under 2^24 (1024 · 127² < 2^24): exact in float32
_WEIGHTED_ROWS = 8192  # rows converted to float64 at a time for Σ(m k): 16 MB
_HALF = 12  # m is split into halves of 12 bits, so that Σm² is summed in int64 without overflow


class Moments:
    """The exact sums of a set of stored vectors that give the mean and variance of their cosines with a query."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.count = 0
        self._firsts: dict[int, np.ndarray] = {}  # x -> int64 [Σm, Σh², Σh·l, Σl²], m = h·2^12 + l
        self._sums: dict[int, np.ndarray] = {}  # e -> int64 (dim - 1,): Σk
        self._squares: dict[int, np.ndarray] = {}  # e -> int64 (dim - 1, dim - 1): Σ k kᵀ
        self._cross: dict[tuple[int, int], np.ndarray] = {}  # (x, e) -> int64 (dim - 1,): Σ m k
        self._floats: tuple[list, list] | None = None  # the sums by e and by (x, e) in float64, made when read

    def add(self, firsts: np.ndarray, steps: np.ndarray, scales: np.ndarray, sign: int = 1) -> None:
        """Count the vectors of first components `firsts` (float32), int8 `steps` and power-of-two `scales` in
        (sign 1) or out (sign -1) of the set."""
        if not len(firsts):
            return
        self.count += sign * len(firsts)
        self._floats = None
        fractions, xs = np.frexp(np.asarray(firsts, dtype=np.float32))
        ms = (fractions.astype(np.float64) * 2**24).astype(np.int64)  # exact: a float32 has 24 bits
        es = np.frexp(np.asarray(scales, dtype=np.float32))[1].astype(np.int64) - 1  # scale = 2^e exactly
        for x in np.unique(xs).tolist():
            m = ms[xs == x]
            high, low = np.divmod(m, 1 << _HALF)
            sums = np.array([m.sum(), (high * high).sum(), (high * low).sum(), (low * low).sum()], dtype=np.int64)
            self._firsts[x] = self._firsts.get(x, 0) + sign * sums
        for e in np.unique(es).tolist():
            chosen = es == e
            k = steps[chosen]
            self._sums[e] = self._sums.get(e, 0) + sign * k.sum(axis=0, dtype=np.int64)
            self._squares[e] = self._squares.get(e, 0) + sign * _outer_sum(k)
            for x in np.unique(xs[chosen]).tolist():
                both = chosen & (xs == x)
                self._cross[x, e] = self._cross.get((x, e), 0) + sign * _weighted_sum(ms[both], steps[both])

    def mean_and_variance(self, query: np.ndarray) -> tuple[float, float]:
        """The mean and variance of the cosines of `query` (a unit vector) with the vectors of the set."""
        if self.count <= 0:
            return 0.0, 0.0
        q0, rest = float(query[0]), np.asarray(query[1:], dtype=np.float64)
        total = squares = 0.0  # summed in the order of the exponents: a float sum's bits depend on its order
        for x, (m, high2, high_low, low2) in sorted(self._firsts.items()):
            total += q0 * float(m) * 2.0 ** (x - 24)
            m2 = (int(high2) << (2 * _HALF)) + (int(high_low) << (_HALF + 1)) + int(low2)  # Σm², exactly
            squares += q0 * q0 * float(m2) * 2.0 ** (2 * x - 48)
        by_scale, by_both = self._as_floats()
        for e, sums, squared in by_scale:
            total += 2.0**e * float(rest @ sums)
            squares += 2.0 ** (2 * e) * float(rest @ squared @ rest)
        for x, e, cross in by_both:
            squares += 2 * q0 * 2.0 ** (x - 24 + e) * float(rest @ cross)
        mean = total / self.count
        return mean, max(squares / self.count - mean * mean, 0.0)

    def _as_floats(self) -> tuple[list[tuple[int, np.ndarray, np.ndarray]], list[tuple[int, int, np.ndarray]]]:
        """(e, Σk, Σ k kᵀ) for each e and (x, e, Σ m k) for each pair, in their order, in float64: converted once
        per set of vectors rather than at each query (~0.1 ms)."""
        if self._floats is None:
            self._floats = (
                [
                    (e, sums.astype(np.float64), self._squares[e].astype(np.float64))
                    for e, sums in sorted(self._sums.items())
                ],
                [(x, e, cross.astype(np.float64)) for (x, e), cross in sorted(self._cross.items())],
            )
        return self._floats


def _outer_sum(steps: np.ndarray) -> np.ndarray:
    """Σ k kᵀ over the rows of `steps`, exactly, as int64."""
    out = np.zeros((steps.shape[1], steps.shape[1]), dtype=np.int64)
    for start in range(0, len(steps), EXACT_ROWS):
        part = steps[start : start + EXACT_ROWS].astype(np.float32)
        out += (part.T @ part).astype(np.int64)
    return out


def _weighted_sum(weights: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Σ m k over the rows, exactly, as int64 (each product is under 2^31: a float64 sum of 2^21 is exact)."""
    out = np.zeros(steps.shape[1], dtype=np.int64)
    for start in range(0, len(steps), _WEIGHTED_ROWS):
        part = steps[start : start + _WEIGHTED_ROWS].astype(np.float64)
        out += (weights[start : start + _WEIGHTED_ROWS].astype(np.float64) @ part).astype(np.int64)
    return out
