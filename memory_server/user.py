"""The memory's user: which entity stands for the person asking, the names the memory gives them, and what every other
entity is to them, so that a first-person question ("where do I live", "who is my boss", "what does my wife do")
finds facts written in the third person ("Lives in Leeds", "Priya's manager", Priya -married to-> Tom).

Everything here is read from the public data of a search index (its entities, documents and relations) the first
time a question needs it, and kept with that index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memory_server.graph import Entity
from memory_server.lazy import lazy_module
from memory_server.lexical import FIRST_PERSON, STOPWORDS, words

if TYPE_CHECKING:
    import numpy as np

    from memory_server.embeddings import Embedder
    from memory_server.search import GraphIndex
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

USER_TYPES = frozenset({"user", "self", "me", "myself", "owner"})
USER_NAMES = frozenset({"user", "default_user", "me", "myself", "i"})
PERSON_TYPES = ("person", "human", "individual", "user", "people", "employee", "self")
USER_LEAD = 1.5  # how far ahead of the next person the user's entity must be
RARE_TYPE = 0.05  # an entity's type says what it is to the user ("pet") when at most this share of entities have it
ROLE_MATCH = 0.55  # cosine a word of the question needs with a role ("boss" and "manager" 0.58)
ROLE_MARGIN = 0.05  # the entities reached are those whose role fits within this of the best fitting one
# "Name: Tomasz Wójcik", "goes by Tom", "name is Sam": how a memory about "default_user" says who that is.
_ALIAS = re.compile(r"\b(?:name(?: is|:)|goes by|called|known as)\s+([A-Z][\w'-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class User:
    """The user's entity in one index, the first names it goes by, its own documents, and the roles of the others."""

    number: int
    names: tuple[str, ...]  # lower-case first names and aliases ("hannah"), without generic ones ("default_user")
    own: np.ndarray  # the documents of the user's own observations
    roles: dict[int, frozenset[str]]  # entity number -> words saying what it is to the user


def user_of(index: GraphIndex) -> User | None:
    """The user of the index's memory (see find_user), with what first-person questions need to know about them."""
    number = find_user(index.entities, [(a, b) for a, _, b in index.links])
    if number is None:
        return None
    entity = index.entities[number]
    names = _names(entity)
    return User(number, names, np.flatnonzero(index.owner == number), _roles(index, number, names))


def find_user(entities: Sequence[Entity], links: Iterable[tuple[str, str]]) -> int | None:
    """The number of the entity that stands for the memory's user, if one can be told: an entity typed or named as
    the user ("user", "default_user", as the official server's suggested prompt names it), else the person at the
    centre of the graph: the most relations, observations and mentions of their first name, well ahead of anyone
    else (a memory about two people equally, or about none, has no user)."""
    for number, entity in enumerate(entities):
        if entity.entity_type.strip().lower() in USER_TYPES or entity.name.strip().lower() in USER_NAMES:
            return number
    degree: dict[str, int] = {}
    for source, target in links:
        degree[source] = degree.get(source, 0) + 1
        degree[target] = degree.get(target, 0) + 1
    people = [
        (degree.get(entity.name, 0) + len(entity.observations), number)
        for number, entity in enumerate(entities)
        if any(kind in entity.entity_type.lower() for kind in PERSON_TYPES)
    ]
    if not people:
        return None
    said = "\n".join(o.lower() for e in entities for o in e.observations)
    weight = []
    for count, number in sorted(people, reverse=True)[:5]:  # the few best connected: counting is a text scan
        first = entities[number].name.split()[0].lower() if entities[number].name.split() else ""
        weight.append((count + (said.count(first) if len(first) > 2 else 0), number))
    weight.sort(reverse=True)
    best, number = weight[0]
    runner_up = weight[1][0] if len(weight) > 1 else 0
    return number if best >= USER_LEAD * max(runner_up, 3) else None


def role_documents(index: GraphIndex, user: User, query: str, embedder: Embedder) -> tuple[np.ndarray, np.ndarray]:
    """For a first-person question, the documents of the entities whose role for the user fits a word of the
    question best ("my husband": married to Pieter; "my boss": Hannah's manager; "who do I report to": reports to
    Karim), with the user's own documents that name them ("Married to Pieter Claes"); and, when the role is all the
    question asks ("who is my boss", not "what does my boss like"), those of their documents that name the user
    ("Hannah's manager since 2023"): they say what the entity is to the user."""
    none = np.zeros(0, dtype=np.int64)
    asked = [w for w in dict.fromkeys(words(query)) if w not in STOPWORDS and len(w) > 2 and embedder.knows(w)]
    if not asked or not user.roles:
        return none, none
    roles = sorted({role for found in user.roles.values() for role in found})
    fit = embedder.encode(asked) @ embedder.encode(roles).T  # word x role
    column = {role: n for n, role in enumerate(roles)}
    fits = {number: fit[:, [column[r] for r in found]].max(axis=1) for number, found in user.roles.items()}
    bar = max(ROLE_MATCH, max(float(f.max()) for f in fits.values()) - ROLE_MARGIN)
    chosen = [number for number, f in fits.items() if f.max() >= bar]
    if not chosen:
        return none, none
    found = np.isin(index.owner, chosen)
    identity = np.zeros(0, dtype=np.int64)
    if all(max(fits[n][w] for n in chosen) >= bar for w in range(len(asked))) and user.names:
        identity = np.asarray(
            [d for d in np.flatnonzero(found) if _names_any(index.observations[d], user.names)], dtype=np.int64
        )
    named = [first for first in (_first(index.entities[n].name) for n in chosen) if len(first) > 2]
    for document in user.own:
        said = (index.observations[document] or "").lower()
        if any(name in said for name in named):
            found[document] = True
    return np.flatnonzero(found), identity


def _names_any(observation: str | None, names: tuple[str, ...]) -> bool:
    said = (observation or "").lower()
    return any(name in said for name in names)


def _names(entity: Entity) -> tuple[str, ...]:
    """The first names the user goes by: the first word of the entity's name (unless it is a generic one such as
    "default_user"), and those its observations give ("Name: Tomasz Wójcik, goes by Tom")."""
    names = [] if entity.name.strip().lower() in USER_NAMES else [_first(entity.name)]
    for observation in entity.observations:
        names += [match.group(1).lower() for match in _ALIAS.finditer(observation)]
    return tuple(n for n in dict.fromkeys(names) if len(n) > 2 and n not in FIRST_PERSON)


def _roles(index: GraphIndex, user: int, names: tuple[str, ...]) -> dict[int, frozenset[str]]:
    """What each entity is to the user, in words: the types of their relations ("married to", "reports to"), the
    entity's own type when few entities share it ("pet"), and what the memory calls it after one of the user's
    names ("Hannah's manager", "Hannah and Pieter's daughter", "godchild of Hannah")."""
    numbers = {e.name: n for n, e in enumerate(index.entities)}
    me = index.entities[user].name
    roles: dict[int, set[str]] = {}
    for source, kind, target in index.links:
        other = target if source == me else source if target == me else None
        if other is not None and other in numbers and other != me:
            roles.setdefault(numbers[other], set()).add(kind.strip().lower())
    types: dict[str, int] = {}
    for entity in index.entities:
        types[entity.entity_type.strip().lower()] = types.get(entity.entity_type.strip().lower(), 0) + 1
    for number, found in roles.items():
        kind = index.entities[number].entity_type.strip().lower()
        if kind and types[kind] <= RARE_TYPE * len(index.entities):
            found.add(kind)
    for name in names:
        pattern = re.compile(rf"\b{re.escape(name)}(?: and \w+)?'s ((?:\w+ )?\w+)|\b(\w+) of {re.escape(name)}\b")
        for document in index.documents_saying(name):
            owner = int(index.owner[document])
            if owner == user:
                continue
            for match in pattern.finditer(index.observations[document].lower()):
                said = [w for w in words(match.group(1) or match.group(2)) if w not in STOPWORDS and len(w) > 2]
                if said:
                    roles.setdefault(owner, set()).update(said)
    return {number: frozenset(found) for number, found in roles.items() if found}


def _first(name: str) -> str:
    return name.split()[0].lower() if name.split() else ""
