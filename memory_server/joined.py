"""Many texts lower-cased into one string, so that finding which of them contain a needle is one `str.find` scan
instead of a loop over every text in Python (entity names for a search that names an entity, the keyword search,
the observations that name the user).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


class JoinedText:
    """Many texts lower-cased into one string, so finding which of them contain a needle is one `str.find` scan."""

    GAP = "\x00"

    def __init__(self, texts: Iterable[str]) -> None:
        self._join([text.lower() + self.GAP for text in texts])

    def _join(self, pieces: list[str]) -> None:
        self.starts = np.cumsum([0] + [len(p) for p in pieces[:-1]]).tolist() if pieces else []
        self.text = "".join(pieces)

    def replaced(self, kept: np.ndarray, texts: Callable[[int], str]) -> JoinedText:
        """The joined text whose i-th text is this one's text kept[i], or texts(i) where kept[i] is -1. Stretches of
        texts kept in order are copied as one slice."""
        if not len(kept):
            return JoinedText(())
        bounds = np.append(np.asarray(self.starts, dtype=np.int64), len(self.text))
        lengths = np.zeros(len(kept), dtype=np.int64)
        lengths[kept >= 0] = np.diff(bounds)[kept[kept >= 0]]
        pieces = []
        cuts = np.flatnonzero((np.diff(kept) != 1) | (kept[1:] < 0) | (kept[:-1] < 0)) + 1
        for first, last in zip([0, *cuts.tolist()], [*cuts.tolist(), len(kept)]):
            if kept[first] >= 0:
                pieces.append(self.text[bounds[kept[first]] : bounds[kept[last - 1] + 1]])
                continue
            for number in range(first, last):
                pieces.append(texts(number).lower() + self.GAP)
                lengths[number] = len(pieces[-1])
        joined = JoinedText(())
        joined.text = "".join(pieces)
        joined.starts = (np.cumsum(lengths) - lengths).tolist()
        return joined

    def holders(self, needle: str, limit: int | None = None) -> list[int]:
        """Numbers of the texts that contain `needle` (already lower-case), in order."""
        found: list[int] = []
        position = self.text.find(needle)
        while position != -1 and (limit is None or len(found) < limit):
            number = bisect.bisect_right(self.starts, position) - 1
            found.append(number)
            following = self.starts[number + 1] if number + 1 < len(self.starts) else len(self.text)
            position = self.text.find(needle, following)
        return found
