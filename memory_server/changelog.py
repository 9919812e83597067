"""The states a store's graph has been in, numbered, and what took it from each to the next: what lets a search
index ask which entities and relations may differ since the version it was built from, and compare only those.

A state whose change is not known (a first read, a read after the graph was released) starts the log afresh:
no version before it can be compared with later ones. Only the last LOGGED_CHANGES states are kept.
"""

from __future__ import annotations

from collections import deque

from memory_server.graph import Changes

LOGGED_CHANGES = 64  # states `since` can answer for


class ChangeLog:
    def __init__(self) -> None:
        self.version = 0  # counts the states; search indexes key on it
        self._log: deque[tuple[int, Changes]] = deque(maxlen=LOGGED_CHANGES)  # what each version changed
        self._floor = 0  # no version before this one can be compared with later ones
        self._pending = Changes()  # changed in a graph dropped before it was written: part of the next state's change

    def since(self, version: int) -> Changes | None:
        """The entities and relations that may differ between `version` and now (empty if none), or None when the
        log cannot tell (a version before a fresh start, or more than LOGGED_CHANGES versions ago)."""
        if version == self.version:
            return Changes()
        if version > self.version or version < self._floor or not self._log or self._log[0][0] > version + 1:
            return None
        changes = Changes()
        for number, changed in self._log:
            if number > version:
                changes |= changed
        return changes

    def advance(self, changes: Changes | None) -> None:
        """One more state, which `changes` took the graph to (None: not known, everything may differ)."""
        self.version += 1
        if changes is None:
            self._log.clear()
            self._floor = self.version
        else:
            self._log.append((self.version, changes | self._pending))
        self._pending = Changes()

    def carry(self, changes: Changes) -> None:
        """Changes made to a graph that was dropped unwritten (the file changed under it): the records they touched
        may differ from what an index saw, so the next state's change names them too."""
        self._pending |= changes

    def forget(self) -> None:
        """The graph was released: the next state is read from scratch and compares with no earlier one."""
        self._log.clear()
        self._floor = self.version + 1
