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

from memory_server.answers import MONTHS
from memory_server.hits import NAME_MATCH_RANK, LabelledHit, by_entity
from memory_server.kinship import names_a_role
from memory_server.lexical import tokenize, words

# A note that says it no longer holds: "(old number, stopped Feb 2025)", "Previous address: ...", "First fix: 1.89%
# for 3 years, ended August 2022", "Used to swim". Not "Old ThinkPad for side projects", "a former warehouse", "the
# previous month": words that date something else; nor "stopped by the bakery", "ended up in Leeds", "got used to
# early starts": a visit, an outcome, a habit.
_OVER = re.compile(
    r"\(\s*old\b|\bprevious(?:ly)?\b(?! (?:day|week|month|year|tax|deploy|version|release|one)s?\b)"
    r"|\b(?:formerly|no longer|not any ?more|expired)\b|\bstopped\b(?! (?:by|off)\b)|\bended\b(?! up\b)"
    r"|"
    + "".join(f"(?<!\\b{be} )" for be in ["is", "am", "are", "was", "be", "been", "get", "gets", "got", "getting"])
    + r"\bused to\b",
    re.IGNORECASE,
)
# A note that says something changed, or holds now: "went up to £1,340", "reduced to 125 mg", "New mobile since Feb
# 2025", "Current fix: 4.29%", "now at Aldi"; "since" a date, not "since childhood"; "new", not a name's "New York" or
# "New Year".
_CHANGED = re.compile(
    r"\b(?:(?:went|gone|goes) (?:up|down) to|(?:rose|fell|raised|increased|decreased|reduced|lowered|cut|changed"
    r"|moved|switched|upgraded|downgraded|promoted|renamed) to|now|new(?!\s+(?-i:[A-Z]))|current(?:ly)?|still)\b"
    r"|\bsince (?:\d|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|last|early|late|mid)[a-z]*\b)",
    re.IGNORECASE,
)
# What a question asks for: what held before ("my old flat", "my previous job"; not "before Brightwave", "the week
# before August 3", nor "a one-year-old"), the past (as ranked), or what holds now ("now", "currently"; not "new" or
# "still": "what new activity has Tim started", "would she still want to").
_ASKS_BEFORE = frozenset(["previous", "previously", "former", "formerly", "used", "ex", "originally"])
_OLD_OF = re.compile(r"\b(?:my|our|your|his|her|their|s) old\b")  # "my old flat", not "old notebooks"
_ASKS_PAST = _ASKS_BEFORE | frozenset(["old", "did", "was", "were", "had", "ago", "last", "first", "before"])
_ASKS_NOW = frozenset(["now", "current", "currently", "anymore", "nowadays"])
_AGE = re.compile(r"\b(?:year|month|week|day)s? old\b")


def is_over(note: str) -> bool:
    """Whether a note says it no longer holds; not one that goes on to say what holds now ("Previously at Acme, now
    at Globex" is the current note; "stopped since May" still says it is over)."""
    ends = [m.end() for m in _OVER.finditer(note)]
    return bool(ends) and not any(
        m.start() >= ends[-1] and not m.group().lower().startswith("since") for m in _CHANGED.finditer(note)
    )


def says_change(note: str) -> bool:
    """Whether a note says something changed, or what holds now."""
    return _CHANGED.search(note) is not None


def current_first(query: str, hits: Sequence[LabelledHit], returned: int | None = None) -> list[LabelledHit]:
    """`hits` (best first), each entity's hits in the order of time the question asks for, in the places its hits
    held (other entities' hits keep theirs, every place keeps its score): see the module's docstring. A note that
    is over goes after one of its entity's that says what changed about the same thing (they share a term: "old
    number" and "New mobile since Feb 2025" share "mobile"); alone, it still answers ("Tried yoga in 2022 but
    stopped" for "do I do yoga"), and a memory's other changes are about other things. Hits past the first
    `returned` (None: all are) only take the place of a note that is over, as what replaced it."""
    said = _of_time(words(query))
    spoken = " ".join(said)
    asked = set(words(_AGE.sub(" ", spoken)))
    before = bool(asked & _ASKS_BEFORE) or _OLD_OF.search(spoken) is not None
    past = before or bool(asked & _ASKS_PAST)
    now = bool(asked & _ASKS_NOW) or "these days" in spoken or "at the moment" in spoken
    out = list(hits)
    for found in by_entity(hits).values():
        # a name match keeps its place on top
        places = [n for n in found if hits[n].hit.observation is not None and hits[n].hit.rank < NAME_MATCH_RANK]
        if len(places) < 2:
            continue
        notes = {n: hits[n].hit.observation or "" for n in places}
        shown = sum(returned is None or n < returned for n in places)  # the places of hits returned come first
        if before:
            # any note that tells what is over, though it goes on to what holds now ("Previously at Acme, now at
            # Globex" answers "where did I work before"); stable: the ranking's order otherwise
            wanted = sorted(places[:shown], key=lambda n: _OVER.search(notes[n]) is None) + places[shown:]
        elif past:
            continue
        else:
            name = set(tokenize(hits[places[0]].hit.entity.name))  # a speaker's every fact may say their name
            wanted = _in_time(places, notes, now, name, shown)
        for place, n in zip(places, wanted):
            held = hits[place].hit
            out[place] = replace(hits[n], hit=replace(hits[n].hit, score=held.score, rank=held.rank))
    return out


def _of_time(said: list[str]) -> list[str]:
    """A question's words but those that say who rather than when: "my ex's address", "my former boss's phone", "my
    old teacher" ask for that person's facts as they are now; and "used" but in "used to" ("the card used for
    Netflix" is in the present)."""
    return [
        word
        for n, word in enumerate(said)
        if word != "ex"
        and not (word == "used" and said[n + 1 : n + 2] != ["to"])
        and not (word in _ASKS_BEFORE | {"old"} and n + 1 < len(said) and names_a_role(said[n + 1]))
    ]


def _in_time(places: list[int], notes: dict[int, str], now: bool, name: set[str], shown: int) -> list[int]:
    """One entity's hits (best first) for a question in the present: the first note below one that is over that
    says what changed about the same thing takes its place, just before it; for a question about now, a note that
    says what changed goes before the first note above it about the same thing, if among the first `shown` (the
    others only replace a note that is over)."""
    terms = {n: _about(notes[n]) - name for n in places}
    order = list(places)
    for n in places:
        if not is_over(notes[n]):
            continue
        below = order[order.index(n) + 1 :]
        newer = next((m for m in below if says_change(notes[m]) and terms[m] & terms[n]), None)
        if newer is not None:  # the change takes the old note's place: the notes between were ranked below both
            order.remove(newer)
            order.insert(order.index(n), newer)
    if now:
        for n in places:
            if not says_change(notes[n]) or is_over(notes[n]) or order.index(n) >= shown:
                continue
            above = order[: order.index(n)]
            older = next((m for m in above if not says_change(notes[m]) and terms[m] & terms[n]), None)
            if older is not None:
                order.remove(n)
                order.insert(order.index(older), n)
    return order


def _about(note: str) -> set[str]:
    """The terms of what a note is about: without the words that say it changed, is over, or when ("stopped Feb
    2025" and "New gym since Feb 2025" are not one thing)."""
    said = words(_CHANGED.sub(" ", _OVER.sub(" ", note)))
    return set(tokenize(" ".join(w for w in said if w not in MONTHS and not any(c.isdigit() for c in w))))
