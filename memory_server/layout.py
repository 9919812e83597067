"""Where each line of a memory file is: its size in bytes and a hash of its bytes, by slot of the graph.

A slot is a place in `KnowledgeGraph.records`; a slot whose line is gone from the file has size 0. Sizes are
also summed per block of slots, so the offset of a line (which a rewrite needs, to copy the lines around a changed
one) is found without adding up every line before it. The hashes let a graph recognise its lines in a new state
of the file without parsing them (Python's hash of the bytes: the same within one process, which is all that is
compared).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable


class Layout:
    BLOCK = 1024

    def __init__(self, sizes: Iterable[int] = (), hashes: Iterable[int] = ()) -> None:
        self.sizes = array("q", sizes)
        self.hashes = array("q", hashes)
        step = self.BLOCK
        self._blocks = [sum(self.sizes[start : start + step]) for start in range(0, len(self.sizes), step)]

    def __len__(self) -> int:
        return len(self.sizes)

    def copy(self) -> Layout:
        layout = Layout()
        layout.sizes, layout.hashes = array("q", self.sizes), array("q", self.hashes)
        layout._blocks = list(self._blocks)
        return layout

    def append(self, size: int, digest: int) -> None:
        if len(self.sizes) % self.BLOCK == 0:
            self._blocks.append(0)
        self.sizes.append(size)
        self.hashes.append(digest)
        self._blocks[-1] += size

    def set(self, slot: int, size: int, digest: int) -> None:
        self._blocks[slot // self.BLOCK] += size - self.sizes[slot]
        self.sizes[slot] = size
        self.hashes[slot] = digest

    def offset(self, slot: int) -> int:
        """Bytes before `slot`'s line (for len(self): the size of the file)."""
        block = slot // self.BLOCK
        return sum(self._blocks[:block]) + sum(self.sizes[block * self.BLOCK : slot])

    def slot_at(self, offset: int) -> int | None:
        """A slot whose line starts at byte `offset` (past the last line: its end), None if that is inside a line."""
        done, block = 0, 0
        while block < len(self._blocks) and done + self._blocks[block] < offset:
            done += self._blocks[block]
            block += 1
        slot = block * self.BLOCK
        while done < offset and slot < len(self.sizes):
            done += self.sizes[slot]
            slot += 1
        return slot if done == offset else None

    def line_hashes(self) -> array[int]:
        """The hashes of the lines in the file, in order (without the slots of lines that are gone)."""
        if 0 not in self.sizes:
            return self.hashes
        return array("q", (digest for size, digest in zip(self.sizes, self.hashes) if size))
