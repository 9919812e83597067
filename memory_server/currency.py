"""Whether a note is still true, as its own words say. People update a memory by adding a note, not by editing the
old one ("Mobile 07700 900412 (old number, stopped Feb 2025)", then "New mobile since Feb 2025: 07700 900873"), and
nothing is lost, so a memory holds both. Neither model reads time: the old note, as near the question as the new one,
often ranks first. So among the hits of one entity, a question in the present reads its current notes before the
ones that say they are over, one that asks for the past ("my old flat", "where did I work before") the other way
round, and one that asks what holds now ("how much is the mortgage each month now") reads first the notes that say
something changed ("payments went up to £1,340 from Sept 2025")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from memory_server.hits import NAME_MATCH_RANK, LabelledHit
from memory_server.lexical import words

# A note that says it no longer holds: "(old number, stopped Feb 2025)", "Previous address: ...", "First fix: 1.89%
# for 3 years, ended August 2022", "Used to swim". Not "Old ThinkPad for side projects", "a former warehouse", "the
# previous month": words that date something else.
_OVER = re.compile(
    r"\(\s*old\b|\bprevious(?:ly)?\b(?! (?:day|week|month|year|tax|deploy|version|release|one)s?\b)"
    r"|\b(?:formerly|used to|no longer|not any ?more|stopped|ended|expired)\b",
    re.IGNORECASE,
)
# A note that says something changed, or holds now: "went up to £1,340", "reduced to 125 mg", "New mobile since Feb
# 2025", "Current fix: 4.29%", "now at Aldi".
_CHANGED = re.compile(
    r"\b(?:(?:went|gone|goes) (?:up|down) to|(?:rose|fell|raised|increased|decreased|reduced|lowered|cut|changed"
    r"|moved|switched|upgraded|downgraded|promoted|renamed) to|now|new|since|current(?:ly)?|still)\b",
    re.IGNORECASE,
)
_ASKS_BEFORE = frozenset(["old", "previous", "previously", "former", "formerly", "before", "used", "ex", "originally"])
_ASKS_PAST = _ASKS_BEFORE | frozenset(["did", "was", "were", "had", "ago", "last", "first"])
_ASKS_NOW = frozenset(["now", "current", "currently", "anymore", "still", "new", "latest", "nowadays"])


def is_over(note: str) -> bool:
    """Whether a note says it no longer holds."""
    return _OVER.search(note) is not None


def says_change(note: str) -> bool:
    """Whether a note says something changed, or what holds now."""
    return _CHANGED.search(note) is not None


def current_first(query: str, hits: Sequence[LabelledHit]) -> list[LabelledHit]:
    """`hits` (best first), each entity's hits in the order of time the question asks for, in the places its hits
    held (other entities' hits keep theirs, every place keeps its score): see the module's docstring."""
    said = words(query)
    asked, spoken = set(said), " ".join(said)
    before, past = bool(asked & _ASKS_BEFORE), bool(asked & _ASKS_PAST)
    now = bool(asked & _ASKS_NOW) or "these days" in spoken or "at the moment" in spoken

    def order(labelled: LabelledHit, replaced: bool) -> int:
        note = labelled.hit.observation or ""
        if is_over(note):
            return -1 if before else (1 if replaced and not past else 0)
        return -1 if now and says_change(note) else 0

    entities: dict[tuple[str, str], list[int]] = {}
    for n, labelled in enumerate(hits):
        if labelled.hit.observation is None or labelled.hit.rank >= NAME_MATCH_RANK:
            continue  # a name match keeps its place on top
        entities.setdefault((labelled.label, labelled.hit.entity.name), []).append(n)
    out = list(hits)
    for places in entities.values():
        if len(places) < 2:
            continue
        # a note that is over goes after the others only when one of them says what changed: alone, it still
        # answers ("Tried yoga in 2022 but stopped" for "do I do yoga")
        replaced = any(says_change(hits[n].hit.observation or "") for n in places)
        wanted = sorted(places, key=lambda n: order(hits[n], replaced))  # stable: the ranking's order in a class
        for place, n in zip(places, wanted):
            held = hits[place].hit
            out[place] = replace(hits[n], hit=replace(hits[n].hit, score=held.score, rank=held.rank))
    return out
