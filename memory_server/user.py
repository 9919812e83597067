"""The memory's user: which entity stands for the person asking, the names the memory gives them, and what every other
entity is to them, so that a first-person question ("where do I live", "who is my boss", "what does my wife do")
finds facts written in the third person ("Lives in Leeds", "Priya's manager", Priya -married to-> Tom).

Everything here is read from a search index (its entities, documents and relations) the first time a question
needs it, and kept with that index until the memory changes. What it reads from every entity (is it a person, how
many relations, what its notes call it after the user's name) is kept in the index's EntityCache and read again
only for the entities a change touched: after a write, finding the user again costs what the write changed.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memory_server.answers import MONTHS
from memory_server.graph import Entity, Relation
from memory_server.joined import JoinedText, unaccented
from memory_server import kinship
from memory_server.lazy import lazy_module
from memory_server.lexical import FIRST_PERSON, STOPWORDS, is_first_person, stem, tokenize, words
from memory_server.occupations import is_title
from memory_server.user_facts import (
    USER_NAMES,
    called_by,
    called_in,
    degrees,
    introduced_as,
    mentions_in,
    person_flags,
    persons,
    typed_as_user,
)

if TYPE_CHECKING:
    import numpy as np

    from memory_server.embeddings import Embedder
    from memory_server.entity_cache import EntityCache
    from memory_server.search import GraphIndex
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

USER_LEAD = 1.5  # how far ahead of the next person the user's entity must be
USER_NAMESAKES = 3  # at most this many other entities named as the user are the user ("Rosa", "Rosa Delgado")
RARE_TYPE = 0.05  # an entity's type says what it is to the user ("pet") when at most this share of entities have it
ROLE_MATCH = 0.55  # cosine a word of the question needs with a role ("boss" and "manager" 0.58)
ROLE_MARGIN = 0.05  # the entities reached are those whose role fits within this of the best fitting one
# "Name: Tomasz Wójcik", "Full name Aoife Gallagher", "goes by Tom", "name is Sam": how a memory about
# "default_user" says who that is (the words are matched in any case, the name must be capitalised).
_ALIAS = re.compile(
    r"\b(?i:(?:(?:full |real )?name(?: is|:)?|goes by|called|known as))\s+([A-Z][\w'-]*(?: [A-Z][\w'-]*)*)"
)
# An alias names the note's own entity only at the start of a clause ("Name: ...", "Tomasz, goes by Tom", "also
# called Tom", "my name is ..."): after a noun or a possessive it names another ("Boss's name is Dana Okoro", "a cat
# called Minou", "Brother called Nikos Papadakis", "a bar known as The Spot"), and a note that opens with "Called
# ..." is a phone call.
_NAMED_FIRST = re.compile(r"([A-Z][\w'-]*(?: [A-Z][\w'-]*)+)\s*,\s*")  # "Kwabena Mensah, " before "goes by Kwab"
_QUOTED = re.compile(r"[\"\u201c]([^\W\d_][\w'-]*)[\"\u201d]")  # a quoted word, a name if capitalised: "Rafa", "Élo"
_CLAUSE_END = tuple(",;:(.!?-\u2013\u2014")
_BEFORE_ALIAS = frozenset({"also", "usually", "often", "sometimes", "mostly", "be", "been", "my"})
# Relation types that say two entities are one person ("default_user" -is-> "Aoife Gallagher").
IDENTITY_RELATIONS = frozenset({"is", "same as", "is same as", "also known as", "aka", "alias of", "identical to"})
# What the other end of a relation is to the user when the relation is said from the user's side: the user is
# "child of" Brid, so Brid is the user's parent; the user "reports to" Deirdre, so Deirdre is the user's manager.
# A question names the other's role ("my mum", "my boss"), the memory often the user's.
CONVERSE = {
    "child": "parent", "son": "parent", "daughter": "parent", "parent": "child", "mother": "child",
    "father": "child", "grandchild": "grandparent", "grandparent": "grandchild", "patient": "doctor",
    "student": "teacher", "pupil": "teacher", "teacher": "student", "employee": "employer", "client": "provider",
    "mentee": "mentor", "mentor": "mentee", "tenant": "landlord", "landlord": "tenant",
    "reports to": "manager", "works for": "employer", "mentored by": "mentor",  # "managed by": _doer
    "godparent": "godchild", "godmother": "godchild", "godfather": "godchild", "godchild": "godparent",
    "godson": "godparent", "goddaughter": "godparent",
}  # fmt: skip
# What a note says its entity is to someone when it opens with it ("Hannah's mother", "Hannah's older brother, 45").
KIN = frozenset(
    "mother father mum mom dad parent son daughter child wife husband partner spouse fiance fiancee brother sister "
    "sibling grandmother grandfather grandma grandpa granny aunt uncle cousin niece nephew stepmother stepfather "
    "stepson stepdaughter boyfriend girlfriend carer caregiver godmother godfather godparent godson goddaughter "
    "godchild".split()
)
_DESCRIBED = re.compile(r"(?:is |the )?([\w-]+)'s (?:\w+ )?(\w+)")
# What a child calls a parent or grandparent, said without whose ("ring mum", "dad's car"), is the speaker's
_HOME_WORDS = "mum|mom|mam|mammy|mummy|mommy|mama|dad|daddy|papa|granny|grandma|grandpa|gran|grandad|granddad"
_PARENT = re.compile(rf"\b(?:{_HOME_WORDS})\b(?![-'\u2019]\w\w)", re.IGNORECASE)  # not "mum-to-be", "dad's" is
_AND_PARENT = re.compile(rf"\b(?:{_HOME_WORDS})\s+(?:and|or|&)\s+$", re.IGNORECASE)  # "mum and " before "dad"
# Words after a relative or a job that still ask about them: "what's Rafa's wife called", "Léa's mom's number"
_AFTER_SOMEONE = frozenset(
    {"called", "named", "name", "number", "phone", "mobile", "cell", "email", "address", "birthday"}
)
# "when's" is "when is", no one's
_IS_SHORTENED = frozenset({"what", "when", "where", "who", "how", "why", "that", "it", "there", "here", "he", "she"})
_WHOSE = frozenset("my our your his her their its the a an this that new single step".split())  # someone's mum
_DOCTOR = re.compile(r"Dr\.?\s")  # a name that says a doctor ("Dr. Lemalu", "Dr Cho"; not "DR Congo")
_WORD_BREAK = re.compile(r"[_\-]+|(?<=[a-z])(?=[A-Z])")  # "child_of", "worksAt": the words of a relation type


@dataclass(frozen=True)
class User:
    """The user's entity in one index, the first names it goes by, its own documents, and the roles of the others."""

    number: int
    names: tuple[str, ...]  # lower-case first names and aliases ("hannah"), without generic ones ("default_user")
    own: np.ndarray  # the documents of the user's own observations, in every entity that is the user
    selves: frozenset[int]  # the entities that are the user
    roles: dict[int, frozenset[str]]  # entity number -> words saying what it is to the user ("my mother")
    said: dict[int, frozenset[str]]  # the same, from relations and types only, with relation types as the memory
    # says them ("child of": the user is the child), which a question without "my ..." is read against ("who do I
    # report to")
    called: tuple[str, ...] = ()  # lower-case names a question may call the user by ("sione taufa", "sione"): their
    # full names, and first names and aliases no one else in the memory has, longest first


def in_first_person(query: str, user: User) -> str:
    """`query` as the user would ask it of themselves: when it calls them by name ("what blood type is Sione":
    "what blood type is me", "when is Sione's birthday": "when is my birthday"), and when it calls a parent as
    their child does, with no one's before it ("when did dad die", "which care home is Mum in": "my dad", "my
    Mum"). What first-person questions need (the user's notes, their roles) then applies, and the user's name no
    longer matches everyone said to know them ("saw Sione once"). A name counts only capitalised ("Will", not
    "will"), unless the whole question is lower case."""
    query = _by_name(query, user.called)  # first: a user called "Dad" is not their own dad ("my Dad": "my me")
    return _PARENT.sub(functools.partial(_as_mine, query), query)


def may_call(query: str, called: tuple[str, ...]) -> bool:
    """Whether `in_first_person` may change `query` for a user `called` so, or the question is in the first person
    (both need the user)."""
    return is_first_person(query) or bool(_PARENT.search(query)) or bool(called and _naming(called).search(query))


def _by_name(query: str, called: tuple[str, ...]) -> str:
    """`query` with the user's names in `called` said as "me", and with 's as "my"."""
    if not called:
        return query
    anyhow = query == query.lower()

    def spoken(match: re.Match[str]) -> str:
        if not (anyhow or match.group(0)[0].isupper()):
            return match.group(0)
        return "my" if match.group(1) else "me"

    return _naming(called).sub(spoken, query)


@functools.lru_cache(maxsize=64)
def _naming(called: tuple[str, ...]) -> re.Pattern[str]:
    """The user's names in `called` as a pattern, with 's after them (group 1); not a part of a hyphenated name
    ("Anne-Marie" is not "Marie")."""
    names = "|".join(r"\s+".join(map(re.escape, name.split())) for name in called)
    return re.compile(rf"(?<!-)\b(?:{names})(?:(['\u2019]s)\b|\b)(?!-\w)", re.IGNORECASE)


def _as_mine(query: str, match: re.Match[str]) -> str:
    """A parent's word matched in `query` as the speaker's ("my mum"), unless someone's ("Mele's mum", "a mum")."""
    return match.group(0) if _someones(query[: match.start()]) else f"my {match.group(0)}"


def _someones(before: str) -> bool:
    """Whether a parent's word said after `before` is someone's: after whose ("Mele's", "a"), or after "and" or "or"
    and a parent's word that is ("Mele's mum and dad")."""
    paired = _AND_PARENT.search(before)
    if paired:
        return _someones(before[: paired.start()])
    last = before.split()[-1].lower().replace("\u2019", "'") if before.split() else ""
    possessive = last.endswith(("'s", "s'")) and last[:-2] not in _IS_SHORTENED
    return before.endswith(("-", "'", "\u2019")) or last in _WHOSE or possessive


def user_of(index: GraphIndex) -> User | None:
    """The user of the index's memory (see _find_in), with what first-person questions need to know about them."""
    cache = index.entity_cache()
    said = functools.cache(lambda: JoinedText(index.documents.snapshot.flat))  # read whole only when needed
    number = _find_in(index, cache, said)
    if number is None:
        return None
    entity = index.entities[number]
    names, full = _names(entity)
    selves = _selves(index, number, names, full)
    names = tuple(dict.fromkeys([*names, *(n for s in selves for n in _names(index.entities[s])[0])]))
    starts, counts = index.name_doc, index.documents.counts
    own = np.concatenate([np.arange(starts[s], starts[s] + counts[s]) for s in sorted(selves)])
    roles, said_roles = _roles(index, cache, selves, names, said)
    return User(
        number, names, own, frozenset(int(s) for s in selves), roles, said_roles, _callable(index, selves, names)
    )


def _callable(index: GraphIndex, selves: Sequence[int], names: tuple[str, ...]) -> tuple[str, ...]:
    """The names a question may call the user by (User.called): the full names of the user's entities and the
    aliases their notes give, and the first names, that are not months ("April"), no other entity's name begins
    with ("Sione"; not "Tom" when "Tom Baker" is a friend, nor "Sione Taufa" when his son is "Sione Taufa Jr"),
    longest first."""
    mine = set(selves)
    full = {e.name.strip().lower() for e in (index.entities[s] for s in selves) if len(e.name.split()) > 1}
    full.update(a.lower() for s in selves for o in index.entities[s].observations for a in _aliases(o) if " " in a)

    def nobody_else(name: str) -> bool:  # no other entity's name is `name` or begins with its words
        said = name.split()
        return all(
            n in mine or index.entities[n].name.lower().split()[: len(said)] != said for n in index.names.holders(name)
        )

    firsts = {n for n in names if n not in STOPWORDS and n not in MONTHS}
    return tuple(sorted(filter(nobody_else, full | firsts), key=len, reverse=True))


def _selves(index: GraphIndex, number: int, names: tuple[str, ...], full_names: Sequence[str]) -> list[int]:
    """The entities that are the user: theirs, those an identity relation ties to it ("is", "same as"), and those
    named as the user is, by a first name or alias of theirs and their surname ("Full name Aoife Gallagher": the
    work memory's "Aoife Gallagher"; "goes by Tom", "Tomasz Wójcik": "Tom Wójcik"), in the entity's name or in
    what its own observations say it is ("Rosa", "Full name Rosa María Delgado": "Rosa Delgado")."""
    me = index.entities[number].name
    known = [name for name in (*full_names, me) if len(name.split()) > 1]
    wanted = {name.lower() for name in known}
    surnames = {name.split()[-1].lower() for name in known}
    tied: set[str] = set()  # said to be the user by a relation
    related: set[str] = set()  # in another relation with the user: someone else ("John" -father of-> "John Smith")
    for relation in index.graph.relations_touching([me]):
        other = (relation.target if relation.source == me else relation.source).lower()
        (tied if _relation_words(relation.relation_type) in IDENTITY_RELATIONS else related).add(other)
    first_names = set(names) | {_first(name) for name in known}

    def named_as_user(entity: Entity) -> bool:
        lowered = entity.name.strip().lower()
        if lowered in tied:
            return True
        if lowered in related:  # a father and son of one name are two people
            return False
        if lowered in wanted:
            return True
        if _first(entity.name) not in first_names:  # the cheap test first: most entities end here
            return False
        said = [entity.name, *(alias for o in entity.observations for alias in _aliases(o))]
        return any(
            len(name.split()) > 1 and _first(name) in first_names and name.split()[-1].lower() in surnames
            for name in said
        )

    # Only entities whose name holds one of those names can pass: found in the index's names, not one by one.
    candidates = _names_holding(index, tied | wanted | first_names)
    others = [n for n in candidates if n != number and named_as_user(index.entities[n])]
    namesakes = [n for n in others if index.entities[n].name.strip().lower() not in tied]
    if len(namesakes) > USER_NAMESAKES:  # a name many people carry (a family tree, a directory) singles out none
        others = [n for n in others if index.entities[n].name.strip().lower() in tied]
    return [number, *others]


def _names_holding(index: GraphIndex, needles: Iterable[str]) -> Sequence[int]:
    """The entities whose lower-case name contains one of `needles` (lower-case), in order."""
    needles = set(needles)
    if "" in needles:  # every name holds it
        return range(len(index.entities))
    return sorted({n for needle in needles for n in index.names.holders(needle)})


def _find_in(index: GraphIndex, cache: EntityCache, said: Callable[[], JoinedText]) -> int | None:
    """The number of the entity that stands for the memory's user, if one can be told: an entity typed or named as
    the user ("user", "default_user", as the official server's suggested prompt names it), else the person at the
    centre of the graph: the most relations, observations and mentions of their first name, well ahead of anyone
    else (a memory about two people equally, or about none, has no user). Read from what the index's cache keeps of
    each entity."""
    person = cache.column(index, "person", persons)
    scores = cache.column(index, "degree", degrees, relational=True) + index.documents.snapshot.counts

    def mentions(first: str) -> int:
        if JoinedText.GAP in first:  # the joined text would find it across two observations
            return mentions_in(first, index.documents.snapshot.flat)
        return cache.total(("mentions", first), functools.partial(mentions_in, first), lambda: said().text.count(first))

    def people_called(first: str) -> list[int]:  # the names that hold it, of people whose first name it is
        return [n for n in index.names.holders(first) if person[n] and _first(index.entities[n].name) == first]

    typed = cache.column(index, "typed as user", typed_as_user)
    return _choose(index.entities, typed, person, scores, mentions, people_called)


def _choose(
    entities: Sequence[Entity],
    typed: np.ndarray,
    person: np.ndarray,
    scores: np.ndarray,
    mentions: Callable[[str], int],
    people_called: Callable[[str], list[int]],
) -> int | None:
    """_find_in, given which entities are typed or named as the user, which are people, each one's relations and
    observations (`scores`), how often the observations say a first name, and the people of a first name."""
    if typed.any():
        return int(np.argmax(typed))
    people = np.flatnonzero(person)
    if not len(people):
        return None
    ranked = _best(people, scores[people], 5)  # the few best connected: counting mentions is a text scan
    # A clear lead in relations and observations decides; else mentions of the first name count too (a name that is
    # also a word, "June", is "mentioned" in every date).
    number = _leader(ranked)
    if number is None:
        firsts = [_first(entities[number].name) for _, number in ranked]
        weighed = [(count + (mentions(f) if len(f) > 2 else 0), n) for (count, n), f in zip(ranked, firsts)]
        number = _leader(sorted(weighed, reverse=True))
    return None if number is None else _anchor(entities, people_called, number)


def _leader(ranked: list[tuple[int, int]]) -> int | None:
    """The first of (weight, number) pairs, best first, when it is well ahead of the second."""
    best, number = ranked[0]
    runner_up = ranked[1][0] if len(ranked) > 1 else 0
    return number if best >= USER_LEAD * max(runner_up, 3) else None


def _best(people: np.ndarray, scores: np.ndarray, count: int) -> list[tuple[int, int]]:
    """The `count` greatest (score, person) pairs, greatest first, as sorted(..., reverse=True) would give them."""
    keys = scores * (int(people[-1]) + 1) + people  # one integer orders as the pair does
    top = np.argpartition(-keys, count - 1)[:count] if len(keys) > count else np.arange(len(keys))
    top = top[np.argsort(-keys[top])]
    return [(int(scores[t]), int(people[t])) for t in top]


def _anchor(entities: Sequence[Entity], people_called: Callable[[str], list[int]], number: int) -> int | None:
    """The user, given the best documented person `number`: that person, unless their own notes say whose
    relative they are ("Hannah's mother": a caregiver's memory, the mother's medications outnumbering the user's
    notes); a memory describes people by what they are to its user, so the one person named so is the user, and
    two (or one who calls the first theirs in turn) leave none. `people_called` gives the people of a first name."""
    anchors = {n for first in _whose(entities[number]) if len(first) > 2 for n in people_called(first) if n != number}
    if not anchors:
        return number
    if len(anchors) == 1:
        anchor = next(iter(anchors))
        if _first(entities[number].name) not in _whose(entities[anchor]):
            return anchor
    return None


def _whose(entity: Entity) -> set[str]:
    """The first names of those whose relative the entity's notes say it is ("Hannah's (older) sister": hannah)."""
    matches = (_DESCRIBED.match(o.lower().replace("\u2019", "'")) for o in entity.observations)
    return {m.group(1) for m in matches if m and m.group(2) in KIN}  # each note read once, not once a person


def role_documents(
    index: GraphIndex, user: User, query: str, embedder: Embedder, evident: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For a first-person question, the documents of the entities whose role for the user fits a word of the
    question best ("my husband": married to Pieter; "my boss": Hannah's manager; "who do I report to": reports to
    Karim), with the user's own documents that name them ("Married to Pieter Claes") and those of `evident` (the
    documents with evidence for the question) that open with their first name ("Health of the kids: Lwazi sees an
    OT"; with no evidence, "Knitting: Bríd knits Aran jumpers" is not about where Bríd lives); and, when the role is
    all the question asks ("who is my boss", not "what does my boss like"), those of their documents that name the
    user ("Hannah's manager since 2023"): they say what the entity is to the user."""
    none = np.zeros(0, dtype=np.int64)
    # a kinship word fits by the table, not by the model, which may not know it whole ("godson", "stepson")
    qualified, named = kinship.qualified(query), kinship.relatives_in(query)
    asked = [
        w
        for w in dict.fromkeys(words(query))
        if w not in STOPWORDS and (len(w) > 2 or w in named) and (embedder.knows(w) or kinship.kin(w))
    ]
    # a word that names a relative or a job comes first: "my manager" names the role in "when is my one-to-one with
    # my manager", "one" does not
    owned = sorted((w for w in possessed(query) if w in asked), key=lambda w: not kinship.names_a_role(w))
    by_role = user.roles if owned else user.said
    if not asked or not by_role:
        return none, none
    roles = sorted({role for found in by_role.values() for role in found})
    fit = embedder.word_vectors(asked) @ embedder.word_vectors(roles).T  # word x role
    column = {role: n for n, role in enumerate(roles)}
    # How well each word fits each set of roles (many entities share one: "Hannah's colleague", "knows"); a kinship
    # word by the relative its roles say, when they say one (memory_server.kinship: to a static model "daughter" is
    # as near "parent" as "child").
    # A kinship word the question qualifies ("my mother-in-law") fits no role that names the relative alone.
    fits = {}
    for found in set(by_role.values()):
        fits[found] = fit[:, [column[r] for r in found]].max(axis=1)
        for w, word in enumerate(asked):
            kept = kinship.role_fit(word, found, named.get(word))
            if kept is not None:
                fits[found][w] = 0.0 if word in qualified else kept
    # The role is named by the first word after "my" that fits one ("my mum" in "what did my mum work as"), or,
    # in a question without one, by any of its words ("who do I report to").
    choosing = list(range(len(asked)))
    for word in owned:
        if max(float(f[asked.index(word)]) for f in fits.values()) >= ROLE_MATCH:
            choosing = [asked.index(word)]
            break
    bar = max(ROLE_MATCH, max(float(f[choosing].max()) for f in fits.values()) - ROLE_MARGIN)
    fitting = {found for found, f in fits.items() if f[choosing].max() >= bar}
    chosen = [number for number, found in by_role.items() if found in fitting]
    if not chosen:
        return none, none
    theirs = _theirs(index, chosen, query, embedder)
    if theirs is not None:  # "my son's teacher": the teacher, not the son
        return theirs
    found = np.isin(index.owner, chosen)
    identity = np.zeros(0, dtype=np.int64)
    if all(max(fits[kinds][w] for kinds in fitting) >= bar for w in range(len(asked))) and user.names:
        identity = np.asarray(
            [d for d in np.flatnonzero(found) if _names_any(index.observations[d], user.names)], dtype=np.int64
        )
    named = list(dict.fromkeys(first for first in (_first(index.entities[n].name) for n in chosen) if len(first) > 2))
    for document in user.own:
        said = (index.observations[document] or "").lower()
        if any(name in said for name in named):
            found[document] = True
    if evident is not None:
        people = [n for n in chosen if _is_person(index, n)]
        found[np.intersect1d(_opening_with(index, people), evident)] = True
    return np.flatnonzero(found), identity


def _theirs(
    index: GraphIndex, chosen: list[int], query: str, embedder: Embedder
) -> tuple[np.ndarray, np.ndarray] | None:
    """For a question through the one a role names ("who is my son's teacher", "my ex's girlfriend"), what
    `relatives_of` finds of them; None when the question asks no one through them."""
    said = words(query)
    at = next(iter(_after_my_possessive(said)), None)
    asked = someone_at(said, at) if at is not None else None
    if asked is None:  # "my husband's job" asks his, of him
        return None
    return relatives_of(index, chosen, asked, embedder)


def _after_my_possessive(said: list[str]) -> list[int]:
    """Where a question's words go on after "my X's" or "our X's" ("who is my son's teacher": teacher's place)."""
    return [n + 3 for n in range(len(said) - 3) if said[n] in ("my", "our") and said[n + 2] == "s"]


def someone_at(said: list[str], at: int) -> str | None:
    """The relative or job the word at `at` of a question's words names, as a kinship word or a title ("boy": son),
    when the question asks about them: the word ends the phrase ("who is Kofi's teacher", "Léa's mom's number",
    "what's Rafa's wife called"); None for another word, or one that begins a longer name ("Kofi's doctor
    appointment", "Sota's parent teacher meeting" ask of an appointment and a meeting)."""
    asked = kinship.as_theirs(said[at]) if at < len(said) else ""
    following = said[at + 1] if at + 1 < len(said) else ""
    if not kinship.names_a_role(asked):
        return None
    return asked if not following or following in STOPWORDS or following in _AFTER_SOMEONE else None


def asks_through(query: str) -> bool:
    """Whether a question asks about someone through another ("what does my husband's brother do", "Cian's boss",
    "how old is Rafa's boy"): a possessive before a relative or a job, as `someone_at` reads it."""
    said = words(query)
    return any(word == "s" and someone_at(said, n + 1) for n, word in enumerate(said))


def asks_of_theirs(query: str) -> bool:
    """Whether a first-person question asks about a thing of the one it names by role ("my mom's next eye shot", "my
    son's school fees"), not about someone of theirs ("my son's teacher")."""
    said = words(query)
    return any(not someone_at(said, at) for at in _after_my_possessive(said))


def through_named(index: GraphIndex, query: str, embedder: Embedder) -> tuple[np.ndarray, np.ndarray] | None:
    """For a question through someone it names ("how do I reach Léa's mom", "who is Kofi's teacher"), what
    `relatives_of` finds of the people of that first name (or one their notes say they go by: "Rafa"); None when
    the question asks no one so; when no one is that to them, their notes that say who is ("Kids: Theo")."""
    said = words(unaccented(query))
    for n in range(len(said) - 2):
        if said[n + 1] != "s" or not _may_name(said, n):
            continue
        first, asked = said[n], someone_at(said, n + 2)
        people = _people_called(index, first) if asked is not None else []
        if people:
            found = relatives_of(index, people, asked, embedder, first)
            notes = _saying(index, people, asked) if found is None else None
            return (notes, notes) if notes is not None and len(notes) else found
    return None


def _may_name(said: list[str], at: int) -> bool:
    """Whether the word at `at`, before a possessive, may be someone's name: not a stop word, nor after one that
    makes it a common noun ("my sister's", "the company's"), nor a relative or a job itself (`_theirs` asks those)."""
    word, before = said[at], said[at - 1] if at else ""
    return not (word in STOPWORDS or before in _WHOSE or kinship.names_a_role(word))


def _saying(index: GraphIndex, people: list[int], asked: str) -> np.ndarray:
    """The notes of `people` that name the relative or the job asked for, when nothing else says who it is ("Kids:
    Theo (born 11 January 2018)" for "how old is Rafa's boy"; "Titulaire (homeroom teacher): Mme Roy"): from the
    postings of those words, not a reading of every note of theirs."""
    found = set()
    for word in {asked, *kinship.of_kind(asked)}:
        holding = _postings(index, word)
        for document in holding[np.isin(index.owner[holding], people)].tolist():
            said = words(index.observations[document] or "")
            if any(w == asked or kinship.same_relative(w, asked) for w in said):
                found.add(document)
    return np.asarray(sorted(found), dtype=np.int64)


def _people_called(index: GraphIndex, first: str) -> list[int]:
    """The people whose first name is `first`, or who a note of theirs says go by it ("Younger brother, "Rafa""):
    each entity holding the word looked at once, its notes read only when its own name is another."""
    documents = _postings(index, first)
    found = []
    for owner in np.unique(index.owner[documents]).tolist():
        if not _is_person(index, owner):
            continue
        if unaccented(_first(index.entities[owner].name)) == first:
            found.append(owner)
            continue
        said = (index.observations[d] or "" for d in documents[index.owner[documents] == owner].tolist())
        if any(unaccented(a).lower() == first for note in said for a in _aliases(note) + _quoted(note)):
            found.append(owner)
    return found


def relatives_of(
    index: GraphIndex, chosen: list[int], asked: str, embedder: Embedder, called: str = ""
) -> tuple[np.ndarray, np.ndarray] | None:
    """The documents of the entities that are `asked` (a kinship word or a job title) to one of `chosen`, by a
    relation ("Refilwe partner of Sipho") or by a note calling them so after their first name, or the name the
    question `called` them ("Ms Daly: Oisín's teacher", "Rafa's wife"; from a topic's note, that note only), and
    those notes; None when nothing is that to them."""
    names = {index.entities[n].name for n in chosen}
    numbers = index.entity_cache().numbers()
    roles = _related(index.graph.relations_touching(names), names, numbers, True)
    noted: dict[int, list[int]] = {}
    firsts = {unaccented(_first(name)) for name in names if len(_first(name)) > 2} | ({unaccented(called)} - {""})
    for first in firsts:
        holding = _postings(index, first)
        # another's notes: each of theirs holds their name (a document opens with it), and says nothing of another
        for document in holding[~np.isin(index.owner[holding], chosen)].tolist():
            # a relative or a job ("Oisín's teacher"), not what else is theirs ("Lwazi's school concert")
            said = called_in(unaccented(index.observations[document] or ""), (first,))
            roles_said = [phrase for phrase in said if any(kinship.names_a_role(w) for w in phrase.split())]
            if roles_said:
                owner = int(index.owner[document])
                roles.setdefault(owner, set()).update(roles_said)
                noted.setdefault(owner, []).append(document)
    for number in chosen:
        roles.pop(number, None)
    fits = {n: _fit(asked, found, embedder) for n, found in roles.items() if found}
    best = max(fits.values(), default=0.0)
    if best < ROLE_MATCH:
        return None
    people = {n for n, fit in fits.items() if fit >= best - ROLE_MARGIN}
    whole = [n for n in people if n not in noted or _is_person(index, n)]
    found = np.isin(index.owner, whole)
    notes = np.asarray(sorted({d for n in people for d in noted.get(n, ())}), dtype=np.int64)
    found[notes] = True
    return np.flatnonzero(found), notes


def _fit(word: str, roles: Iterable[str], embedder: Embedder) -> float:
    """How well a word of a question fits roles: by the kinship table when both say a relative, else by the model."""
    kept = kinship.role_fit(word, roles)
    if kept is not None:
        return kept
    return float((embedder.word_vectors([word]) @ embedder.word_vectors(sorted(roles)).T).max())


def _opening_with(index: GraphIndex, people: list[int]) -> np.ndarray:
    """The documents of other entities that open with the first name of one of `people`: what a topic says of
    them ("Health of the kids: Lwazi sees an OT, Mondays 14:30", "Custody: Lwazi's next week starts 31 May")."""
    firsts = {first for first in (_first(index.entities[n].name) for n in people) if len(first) > 2}
    found = []
    for first in firsts - STOPWORDS:
        for document in _postings(index, first).tolist():
            said = (index.observations[document] or "").lower()
            owner = index.entities[index.owner[document]].name  # "Lwazi Street: Lwazi Street is closed" is its own
            if said.startswith(first) and not said[len(first) : len(first) + 1].isalnum() and _first(owner) != first:
                found.append(document)
    return np.asarray(found, dtype=np.int64)


def _postings(index: GraphIndex, word: str) -> np.ndarray:
    """The documents holding a word (a first name, a kinship word), from its postings, not a pass over every
    document."""
    terms = tokenize(word)
    term = index.lexical.vocabulary.get(terms[0]) if len(terms) == 1 else None
    return index.lexical.postings(term)[0] if term is not None else np.zeros(0, dtype=np.int64)


def _is_person(index: GraphIndex, number: int) -> bool:
    return bool(person_flags([index.entities[number].entity_type])[0])


def possessed(query: str) -> list[str]:
    """The words a question says are the user's: up to two words after "my" or "our", to the next stop word or
    possessive ("where does my mother live": mother, live; "who is my son's teacher": son). The first of them that
    fits a role names the entity asked about; the question's other words say what is asked of it."""
    said = words(query)
    found: list[str] = []
    for n, word in enumerate(said):
        if word in ("my", "our"):
            following = list(itertools.takewhile(lambda w: w not in STOPWORDS, said[n + 1 : n + 3]))
            found += following
    return found


def _names_any(observation: str | None, names: tuple[str, ...]) -> bool:
    said = (observation or "").lower()
    return any(name in said for name in names)


def _names(entity: Entity) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The first names the user goes by: the first word of the entity's name (unless it is a generic one such as
    "default_user"), and those its observations give ("Name: Tomasz Wójcik, goes by Tom"); and the full names
    those give ("Tomasz Wójcik")."""
    names = [] if entity.name.strip().lower() in USER_NAMES else [_first(entity.name)]
    full = []
    for observation in entity.observations:
        for alias in _aliases(observation):
            names.append(_first(alias))
            full.append(alias)
    return tuple(n for n in dict.fromkeys(names) if len(n) > 2 and n not in FIRST_PERSON), tuple(full)


def _names_the_user(kind: str) -> bool:
    """Whether a relation type from the user to another names what the user is ("child of", "patient of"): it
    then says nothing of the other a question without "my ..." could ask ("where was I born" is not about the
    user's parents)."""
    parts = _relation_words(kind).split()
    return len(parts) >= 2 and parts[-1] == "of" and parts[-2] in CONVERSE


def _relation_words(kind: str) -> str:
    """A relation type as words: "works_at", "worksAt" and "works at" are all "works at"."""
    return " ".join(_WORD_BREAK.sub(" ", kind).lower().split())


def _role_of_other(kind: str, user_is_source: bool) -> str:
    """What a relation says the other end is to the user: "married to" both ways, and for "X of" the converse of X
    when the user is the X (the user "child of" Brid: Brid is the user's "parent")."""
    said = _relation_words(kind)
    parts = said.split()
    if not user_is_source:
        return said
    if said in CONVERSE:
        return CONVERSE[said]
    if len(parts) >= 2 and parts[-1] == "of" and parts[-2] in CONVERSE:
        return CONVERSE[parts[-2]]
    if len(parts) == 2 and parts[1] == "by":  # the user "supervised by" Lena: she is the supervisor
        return _doer(parts[0]) or said
    other = kinship.converse(" ".join(parts[:-1])) if len(parts) >= 2 and parts[-1] == "of" else None
    return other or said  # the user "husband of" Roisin: she is the user's spouse, not their husband


def _roles(
    index: GraphIndex,
    cache: EntityCache,
    selves: Sequence[int],
    names: tuple[str, ...],
    said: Callable[[], JoinedText],
) -> tuple[dict[int, frozenset[str]], dict[int, frozenset[str]]]:
    """What each entity is to the user (whose entities are `selves`), in words, read two ways (User.roles, then
    User.said): the types of their relations ("married to", "reports to"; for roles, the user "child of" X makes X
    the user's "parent"), the entity's own type when few entities share it ("pet"), and, for roles only, what the
    memory calls it after one of the user's names ("Hannah's manager", "Hannah and Pieter's daughter", "godchild of
    Hannah")."""
    me = {index.entities[n].name for n in selves}
    relations = index.graph.relations_touching(me)
    numbers, types = cache.numbers(), cache.types()
    rare = RARE_TYPE * len(index.entities)
    found = []
    for converse in (True, False):
        # What the memory calls an entity after the user's name ("Hannah's younger brother") is read only for
        # questions that say "my ...": without one, "how old am I" would be about the "younger" brother. Copied
        # whole (every entity of a large memory may be "Hannah's colleague"), the user's own entities left out.
        roles = dict(_called(index, cache, names, said)) if converse else {}
        for number in selves:
            roles.pop(number, None)
        for number, role in _related(relations, me, numbers, converse).items():
            kind = index.entities[number].entity_type.strip().lower()
            if kind and types[kind] <= rare:
                role.add(kind)
            if _DOCTOR.match(index.entities[number].name):  # "Dr. Peter Lemalu", "registered with": my doctor
                role.add("doctor")
            if converse:  # "Son, born 2016": the "child" a relation says is a son ("my son" is not the daughter)
                role.update(introduced_as(index.entities[number].observations))
            roles[number] = frozenset(role.union(roles.get(number, ())))
        if converse:
            for number, role in _in_laws(index, roles, numbers, said).items():
                if number not in selves:
                    roles[number] = frozenset(role.union(roles.get(number, ())))
        found.append({number: role for number, role in roles.items() if role})
    return found[0], found[1]


def _in_laws(
    index: GraphIndex, roles: dict[int, frozenset[str]], numbers: dict[str, int], said: Callable[[], JoinedText]
) -> dict[int, set[str]]:
    """The parents and siblings of the user's spouse, as the user's "mother in law", "brother in law" (or "parent
    in law" when nothing says the sex): a question says "my mother-in-law", the memory says whose mother she is, by
    a relation ("Mele daughter of Seini") or a note ("Pieter's mother")."""
    found: dict[int, set[str]] = {}
    for spouse, role in roles.items():
        if kinship.role_fit("spouse", role) != kinship.SAME:
            continue
        name = index.entities[spouse].name
        kin_of = _related(index.graph.relations_touching([name]), {name}, numbers, converse=True)
        first = _first(name)
        if first and first not in USER_NAMES:
            for number, words_said in _called_after(index, (first,), said).items():
                kin_of.setdefault(number, set()).update(words_said)
        for number, words_said in kin_of.items():
            relatives = {kinship.in_law(word) for word in words_said} - {None}
            if relatives and number != spouse:
                found.setdefault(number, set()).update(relatives)
    return found


def _related(
    relations: Iterable[Relation], me: set[str], numbers: dict[str, int], converse: bool
) -> dict[int, set[str]]:
    """The types of the relations between the user (named `me`; or another, their spouse) and each other entity,
    as what it is to them."""
    roles: dict[int, set[str]] = {}
    for relation in relations:
        source, kind, target = relation.source, relation.relation_type, relation.target
        other = target if source in me else source if target in me else None
        if other is None or other not in numbers or other in me:
            continue
        if converse or source not in me or not _names_the_user(kind):
            found = roles.setdefault(numbers[other], set())
            if not (converse and source in me and _acts_as(kind)):
                found.add(_role_of_other(kind, converse and source in me))
    return roles


def _acts_as(kind: str) -> bool:
    """Whether a relation type is a verb whose doer has a job title ("supervises": supervisor, "manages": manager,
    "mentors", "teaches"): from the user, it says what the user is to the other, not the other to the user (the
    student the user "supervises" is no "my supervisor", though a static model puts the words side by side)."""
    said = _relation_words(kind).split()
    if len(said) != 1 or not said[0].endswith("s") or said[0].endswith("ss"):
        return False
    return _doer(said[0]) is not None


def _doer(verb: str) -> str | None:
    """The job title of one who does what `verb` says ("supervises", "supervised": supervisor), if there is one."""
    root = stem(verb)
    return next((root + end for end in ("", "er", "r", "or") if is_title(root + end)), None)


def _called(
    index: GraphIndex, cache: EntityCache, names: tuple[str, ...], said: Callable[[], JoinedText]
) -> dict[int, frozenset[str]]:
    """Entity number -> the words its notes call it after one of the user's `names` ("Hannah's manager": manager),
    the user's entities among them. Kept with the index's cache: a change reads only the entities it touched."""

    def everywhere() -> dict[int, frozenset[str]]:
        return {owner: frozenset(called) for owner, called in _called_after(index, names, said).items()}

    return cache.sparse("called", names, functools.partial(called_by, names), everywhere)


def _called_after(index: GraphIndex, names: Iterable[str], said: Callable[[], JoinedText]) -> dict[int, set[str]]:
    """Entity number -> the words its notes call it after one of `names` ("Pieter's mother": mother), from each
    observation that says a name, found in one text."""
    snapshot = index.documents.snapshot
    found: dict[int, set[str]] = {}
    for name in names:
        holders = said().holders(name)
        owners = np.searchsorted(snapshot.starts, holders, side="right") - 1
        for observation, owner in zip(holders, owners.tolist()):
            called = called_in(snapshot.flat[observation], (name,))
            if called:
                found.setdefault(owner, set()).update(called)
    return found


def _aliases(observation: str) -> list[str]:
    """The names a note says its own entity goes by (see _ALIAS and _CLAUSE_END), and the full name a note opens
    with before one ("Kwabena Mensah, goes by Kwab": the work memory's "Kwabena Mensah" is the user); none from a
    note that opens with a relative or a job ("Brother Yaw Mensah, goes by Yaw": the brother's)."""
    found: list[str] = []
    opening = words(observation[:40])[:1]
    if opening and kinship.names_a_role(opening[0]):
        return found
    for match in _ALIAS.finditer(observation):
        before = observation[: match.start()].split()
        opens = not before or before[-1].endswith(_CLAUSE_END) or before[-1].lower() in _BEFORE_ALIAS
        phoned = not before and match.group(0).lower().startswith("called")
        if opens and not phoned:
            found.append(match.group(1))
            named = _NAMED_FIRST.match(observation)
            if named and named.end() == match.start():
                found.append(named.group(1))
    return found


def _quoted(observation: str) -> list[str]:
    """The names a note quotes at the start of a clause, as the one its entity goes by ("Younger brother, "Rafa"");
    not after a word ("Calls Fernanda "Fê"": what she calls another)."""
    found = []
    for match in _QUOTED.finditer(observation):
        before = observation[: match.start()].rstrip()
        # not after a label ("Kids: "Rafa" (9) and "Bia" (6)": the children's names, not the entity's)
        opens = not before or (before.endswith(_CLAUSE_END) and not before.endswith(":"))
        if opens and match.group(1)[0].isupper():
            found.append(match.group(1))
    return found


def _first(name: str) -> str:
    return name.split()[0].lower() if name.split() else ""
