"""The change log of a store's graph (changelog.py): which entities and relations may differ since a version."""

from __future__ import annotations

from memory_server.changelog import LOGGED_CHANGES, ChangeLog
from memory_server.graph import Changes


def entities(*names: str) -> Changes:
    return Changes(frozenset(names))


def test_the_changes_since_a_version_are_those_of_every_state_after_it():
    log = ChangeLog()
    log.advance(None)  # the first read: nothing to compare it with
    first = log.version
    log.advance(entities("a"))
    log.advance(entities("b"))
    log.advance(Changes(relations=frozenset({("a", "b", "knows")})))
    assert log.since(first) == Changes(frozenset({"a", "b"}), frozenset({("a", "b", "knows")}))
    assert log.since(first + 2) == Changes(relations=frozenset({("a", "b", "knows")}))
    assert log.since(log.version) == Changes()


def test_what_it_cannot_tell_is_none():
    log = ChangeLog()
    log.advance(None)
    assert log.since(0) is None  # before the first read
    assert log.since(log.version + 1) is None  # a version not reached
    log.advance(entities("a"))
    seen = log.version
    log.advance(None)  # read again with no change known
    assert log.since(seen) is None and log.since(log.version) == Changes()


def test_only_the_last_states_are_kept():
    log = ChangeLog()
    log.advance(None)
    start = log.version
    for number in range(LOGGED_CHANGES):
        log.advance(entities(f"e{number}"))
    assert log.since(start) == Changes(frozenset(f"e{n}" for n in range(LOGGED_CHANGES)))  # just within reach
    log.advance(entities("one more"))
    assert log.since(start) is None  # its first change fell out of the log
    assert log.since(start + 1) == Changes(frozenset([*(f"e{n}" for n in range(1, LOGGED_CHANGES)), "one more"]))


def test_changes_of_a_graph_dropped_unwritten_are_named_by_the_next_state():
    """A write that found the file changed drops its graph, whose records were changed in memory: an index that saw
    those records must compare them again after the next read."""
    log = ChangeLog()
    log.advance(None)
    seen = log.version
    log.carry(entities("edited in memory"))
    log.advance(entities("changed in the file"))
    assert log.since(seen) == entities("edited in memory", "changed in the file")
    log.advance(entities("c"))
    assert log.since(log.version - 1) == entities("c")  # carried once, not forever


def test_after_a_release_no_earlier_version_compares():
    log = ChangeLog()
    log.advance(None)
    log.advance(entities("a"))
    seen = log.version
    log.forget()
    assert log.since(seen) == Changes()  # still the same state until the graph is read again
    log.advance(None)  # the read from scratch
    assert log.since(seen) is None and log.since(log.version) == Changes()
