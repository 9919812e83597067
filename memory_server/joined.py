"""Many texts lower-cased into one string, so that finding which of them contain a needle is one `str.find` scan
instead of a loop over every text in Python (entity names for a search that names an entity, the keyword search,
the observations that name the user).
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


_CHUNK = 4096  # texts lower-cased in one call


def unaccented(text: str) -> str:
    """The text without its accents (combining marks), as a person may type it: "Siobhan" for "Siobhán"."""
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


class JoinedText:
    """Many texts lower-cased into one string, so finding which of them contain a needle is one `str.find` scan."""

    GAP = "\x00"

    def __init__(self, texts: Iterable[str]) -> None:
        texts = texts if isinstance(texts, (list, tuple)) else list(texts)
        lengths = np.fromiter(map(len, texts), np.int64, len(texts)) + 1
        pieces = []
        for start in range(0, len(texts), _CHUNK):
            pieces.append(self._lowered(texts[start : start + _CHUNK], lengths[start : start + _CHUNK]))
        self.starts = (np.cumsum(lengths) - lengths).tolist()
        self.text = "".join(pieces)

    @classmethod
    def _lowered(cls, texts: Sequence[str], lengths: np.ndarray) -> str:
        """`texts` lower-cased, each followed by GAP, with `lengths` made theirs (their own, plus one).

        Lower-cased many at a time: one call instead of one a text, and the chunks that are ASCII (most) take
        Python's fast path. Lower-casing joined texts is lower-casing each: a GAP is neither cased nor ignored by
        case, so the one letter whose lower case depends on its neighbours (a final "Σ") sees the end of its text.
        """
        joined = cls.GAP.join(texts) + cls.GAP
        lowered = joined.lower()
        if len(lowered) != len(joined):  # a letter that lower-cases to two ("İ"): some texts grew
            lowered = "".join(text.lower() + cls.GAP for text in texts)
            lengths[:] = np.fromiter(map(len, (text.lower() for text in texts)), np.int64, len(texts)) + 1
        return lowered

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
