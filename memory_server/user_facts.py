"""What finding the memory's user (memory_server.user) reads from each entity: whether it is typed or named as the
user, whether it is a person, how many relations it has, how often its notes say a first name, and what its notes
call it after the user's names ("Hannah's manager"). Each is computed for every entity at once, or for the few
entities a change touched, as the index's EntityCache asks (memory_server.entity_cache).
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from memory_server.kinship import kin
from memory_server.lazy import lazy_module
from memory_server.lexical import STOPWORDS, words

if TYPE_CHECKING:
    import numpy as np

    from memory_server.search import GraphIndex
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

_QUALIFIED = re.compile(r"^(?:ex|former) \w+$|\w in law$")
USER_TYPES = frozenset({"user", "self", "me", "myself", "owner"})
USER_NAMES = frozenset({"user", "default_user", "me", "myself", "i"})
PERSON_TYPES = ("person", "human", "individual", "user", "people", "employee", "self")


def user_flags(types: Sequence[str], names: Sequence[str]) -> np.ndarray:
    """Whether each entity is typed ("user", "self") or named ("default_user", "me") as the user."""
    typed = {kind: kind.strip().lower() in USER_TYPES for kind in set(types)}  # few types: each judged once
    flags = np.fromiter(map(typed.__getitem__, types), bool, len(types))
    named = map(USER_NAMES.__contains__, map(str.lower, map(str.strip, names)))
    return flags | np.fromiter(named, bool, len(names))


def person_flags(types: Sequence[str]) -> np.ndarray:
    person = {kind: any(word in kind.lower() for word in PERSON_TYPES) for kind in set(types)}
    return np.fromiter(map(person.__getitem__, types), bool, len(types))


# Columns of the index's EntityCache: the value for each of the index's entities `numbers`.


def typed_as_user(index: GraphIndex, numbers: np.ndarray) -> np.ndarray:
    snapshot = index.documents.snapshot
    return user_flags(_picked(snapshot.types, numbers), _picked(snapshot.names, numbers))


def persons(index: GraphIndex, numbers: np.ndarray) -> np.ndarray:
    return person_flags(_picked(index.documents.snapshot.types, numbers))


def degrees(index: GraphIndex, numbers: np.ndarray) -> np.ndarray:
    """How many ends of relations each entity is (a relation to itself counts twice)."""
    names = _picked(index.documents.snapshot.names, numbers)
    if len(names) <= 64:  # the few entities a change touched: their own relations
        touching = (index.graph.relations_touching([name]) for name in names)
        return np.fromiter((sum(1 + (r.source == r.target) for r in found) for found in touching), np.int64, len(names))
    keys = list(index.graph.relations)
    ends = Counter(map(operator.itemgetter(0), keys))
    ends.update(map(operator.itemgetter(1), keys))
    return np.fromiter(map(ends.get, names, itertools.repeat(0)), np.int64, len(names))


def _picked(values: list[str], numbers: np.ndarray) -> Sequence[str]:
    return values if len(numbers) == len(values) else [values[n] for n in numbers.tolist()]


def mentions_in(first: str, observations: Iterable[str]) -> int:
    """How often `observations` say `first` (lower-case), in any case."""
    return sum(o.lower().count(first) for o in observations)


def called_by(names: tuple[str, ...], index: GraphIndex, number: int) -> frozenset[str] | None:
    """What the notes of the index's entity `number` call it after one of `names`, if anything."""
    called = [w for o in index.documents.snapshot.observations_of(number) for w in called_in(o, names)]
    return frozenset(called) or None


# What a note opens with when it says who its entity is to the memory's user: "Son, born 14 August 2016", "Mom; born
# 1951", "Older sister, lives in Johannesburg", "Ex-husband; married 2014" (a kinship word, before a comma, a semicolon
# or nothing); not "Son of Karen", "Mother of three", "Son Tevita plays rugby" (the entity's son)
_OPENING = re.compile(r"^\s*([A-Za-z][A-Za-z -]{1,40}?)\s*(?:[,;:(]|$|\s[-\u2013\u2014]\s)")
_BEFORE_KIN = frozenset(
    {"older", "younger", "elder", "eldest", "oldest", "youngest", "big", "little", "baby", "twin", "half"}
)


def introduced_as(observations: Iterable[str]) -> list[str]:
    """The words notes open with to say who their entity is to the user ("Older sister, lives in Randburg": older,
    sister; "Ex-husband; married 2014": ex husband)."""
    found = []
    for observation in observations:
        opening = _OPENING.match(observation)
        said = words(opening.group(1)) if opening else []
        phrase = " ".join(said)
        if not said or len(said) > 4:
            continue
        if _QUALIFIED.search(phrase) and kin(said[1] if said[0] in ("ex", "former") else said[0]):
            found.append(phrase)
        elif said[0] == "step" and len(said) == 2 and kin("step" + said[1]):  # "Step-son, 12": a stepson, no son
            found.append("step" + said[1])
        elif kin(said[-1]) and _BEFORE_KIN.issuperset(said[:-1]):
            found += said
    return found


def called_in(observation: str, names: Iterable[str]) -> list[str]:
    """The words a note calls its entity after one of `names` ("Hannah's younger brother": younger, brother)."""
    said = observation.lower()
    found = []
    for name in names:
        if name not in said:
            continue
        pattern = re.compile(rf"\b{re.escape(name)}(?: and \w+)?'s ((?:\w+ )?[\w-]+)|\b(\w+) of {re.escape(name)}\b")
        for match in pattern.finditer(said):
            phrase = " ".join(words(match.group(1) or match.group(2)))
            if _QUALIFIED.search(phrase):  # "ex-wife", "mother-in-law": one role, not a wife nor a mother
                found.append(phrase)
            else:
                found += [w for w in phrase.split() if w not in STOPWORDS and len(w) > 2]
    return found
