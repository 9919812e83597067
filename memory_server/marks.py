"""Which documents of a search's pool hold the answer a question asks for, of the one it asks about: the mark the
transformer's second reading keeps (Hit.shaped, rerank.py), since it reads neither who nor what shape ("what does my
husband do": "12h night shifts" reads nearer than "Midwife, Rotunda Hospital")."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from memory_server import kinship
from memory_server.answers import (
    Shape,
    asked_shape,
    asking_words,
    asks_birth,
    asks_own_birth,
    asks_own_wedding,
    asks_to_reach,
    has_shape,
    says_birth,
    says_wedding,
)
from memory_server.joined import unaccented
from memory_server.lexical import STOPWORDS, is_first_person, stem, stems, words
from memory_server.occupations import is_title
from memory_server.user import asks_of_theirs, asks_through, possessed, role_documents, through_named

if TYPE_CHECKING:
    import numpy as np

    from memory_server.embeddings import Embedder
    from memory_server.search import GraphIndex
    from memory_server.user import User

# Shapes that many of a person's notes have (a date, a time, a figure): marked for a question about the person
# ("how old is my son"), not for one about a thing of theirs
_ANY_NOTES = frozenset({Shape.DATE, Shape.TIME, Shape.NUMBER})
NAMED_AT_MOST = 8  # notes answering a phone or birthday question one entity may have: a person's, not a list's


def answering(index: GraphIndex, query: str, embedder: Embedder, documents: np.ndarray, user: User | None) -> set[int]:
    """Those of `documents` with the shape of answer `query` asks for, of the one person it asks about: named by
    a kinship word or a job title in a first-person question ("my husband", "my dentist": those search._shaped
    raises), or by name (or by what their notes say) when it asks for a job, a phone number or a birthday ("what
    does Gráinne do", "the plumber's number", "when is Noah's birthday"). The user's own notes only for a job
    ("what's my job": "Senior data engineer at Brightwave") or their birth ("how old am I": "b. 3 Aug 1990"): they
    answer questions of every kind ("where did I work before": four of Aoife's notes hold a place), and for another
    shape the mark would lift them all; nor, for a date, all of a named entity's dated notes: only those saying a
    birth."""
    pool = documents.tolist()
    if user is not None and asks_own_wedding(query):  # "Married 18 August 2016" is the spouse's note
        return _owned_answers(index, pool, _married(index, user), says_wedding)
    shape = asked_shape(query)
    # through another ("what does my husband's brother do", "Cian's boss"): neither the role found nor the one named
    # is the one asked about, and a mark would lift their answer over the right one's, unless the other is found
    through = asks_through(query)
    owned = possessed(query)
    if shape is None and asks_to_reach(query) and (through or any(kinship.names_a_role(w) for w in owned)):
        shape = Shape.PHONE  # how to reach a person: their number
    theirs = through_named(index, query, embedder) if through else None
    if theirs is not None:  # "how do I reach Léa's mom": her mother's number, not Léa's
        reached, notes = (set(found.tolist()) & set(pool) for found in theirs)
        return notes if shape is None else {d for d in reached if has_shape(index.observations[d] or "", shape)}
    if shape is None and user is not None and through:  # "who is my son's teacher": "Oisín's teacher"
        return set(role_documents(index, user, query, embedder, documents)[1].tolist()) & set(pool)
    if shape is None or through:
        return set()
    kin = any(kinship.kin(w) for w in owned) and kinship.named_in(query)  # not "my mother-in-law"
    birth = asks_birth(query)
    if user is not None and (kin or any(is_title(w) for w in owned)):
        reached = set(role_documents(index, user, query, embedder, documents)[0].tolist())
        about = [d for d in pool if d in reached]
        births = {d for d in about if says_birth(index.observations[d] or "")} if birth else set()
        if births:  # of a relative's dated notes, those that say the birth ("Born 12 January 1957")
            return births
        if shape in _ANY_NOTES and asks_of_theirs(query):  # "when is my mom's next eye shot": the shot's date, not hers
            return set()
    elif user is not None and asks_own_birth(query):  # of the user's many dated notes, only those saying a birth
        own = set(user.own.tolist())
        return {d for d in pool if d in own and says_birth(index.observations[d] or "")}
    elif shape is Shape.PHONE or birth:
        owners = _named(index, pool, _names_in(query, shape))
        return _owned_answers(index, pool, owners, lambda note: _answers(note, shape))
    elif shape is Shape.PLATE:  # "my number plate": the user's car is no relative, nor named
        owners = _named(index, pool, _names_in(query, shape)) or _vehicles(index, index.owner[pool].tolist())
        about = [d for d in pool if int(index.owner[d]) in owners]
    elif shape is Shape.OCCUPATION:
        named = _names_in(query)
        about = [d for d in pool if named & set(words(unaccented(index.entities[index.owner[d]].name)))]
        # "whats my job", "what do I do for a living"; without "my", the "I" may be in a clause about another, who the
        # question's other words describe: "what does the guy I met at the gym do"
        if not about and user is not None and is_first_person(query) and _asks_own(owned) and (owned or not named):
            own = set(user.own.tolist())
            about = [d for d in pool if d in own]
    else:
        return set()  # "my passport card" names no one; a role fitting it is a guess of the static model
    return {d for d in about if has_shape(index.observations[d] or "", shape)}


def _owned_answers(index: GraphIndex, pool: list[int], owners: set[int], answers: Callable[[str], bool]) -> set[int]:
    """Those of `pool` that are notes of `owners` and that `answers` accepts."""
    return {d for d in pool if int(index.owner[d]) in owners and answers(index.observations[d] or "")}


def _asks_own(owned: list[str]) -> bool:
    """Whether the words a first-person job question says are the user's (user.possessed) ask for a job and name no
    one else: "what's my job", "what's my current job", "my job title", "what do I do for a living"; not "what does
    my partner do"."""
    return set(owned) <= asking_words(Shape.OCCUPATION)


def _names_in(query: str, shape: Shape = Shape.OCCUPATION) -> set[str]:
    """The words of a job (or phone, or birthday) question that may name its person: not stop words, nor those that
    ask for a job ("what do I do for work": "Work" is a topic entity, not a person)."""
    return set(words(unaccented(query))) - STOPWORDS - asking_words(shape)


def _answers(note: str, shape: Shape) -> bool:
    """Whether a note of the one a phone, plate or birthday question names answers it: a phone number, a plate, or
    their birth (of their dated notes, "Born 30/04/2016", not "Bedtime 20:30")."""
    return has_shape(note, shape) if shape in (Shape.PHONE, Shape.PLATE) else says_birth(note)


def _named(index: GraphIndex, pool: list[int], named: set[str]) -> set[int]:
    """The entities a question names among the owners of `pool`: those whose name holds the most of the `named`
    words ("what's Yaw's number": Yaw Mensah), else those whose notes in the pool say one ("the plumber's number": Joe
    Kinsella, "Plumber, boiler service"; "bryce's number": "Steelform: Bryce 021 556 7781")."""
    if not named or not pool:
        return set()
    named = {stem(word) for word in named}  # "noahs bday": Noah
    owners = index.owner[pool].tolist()
    said = {o: len(named & set(stems(index.entities[o].name))) for o in set(owners)}
    most = max(said.values())  # "Thomas Roche's number": Thomas Roche, not Inès Roche
    if most:
        return {o for o, count in said.items() if count == most}
    return {o for d, o in zip(pool, owners) if named & set(stems(index.observations[d] or ""))}


_OURS = re.compile(r"(?i)(?:our |my )?(?:wedding|anniversary)(?: anniversary| day)?$")  # not "Niamh's wedding"
# What names a vehicle (or says it is one, as its type): a word for one, or a maker's name ("Nissan Leaf")
_VEHICLE = re.compile(
    r"\b(?:cars?|vehicles?|ute|truck|bakkie|suv|motorbike|motorcycle|moped|scooter|caravan|campervan"
    r"|motorhome|trailer|audi|bmw|citroen|dacia|fiat|ford|honda|hyundai|kia|mazda|mercedes|nissan|opel|peugeot"
    r"|renault|skoda|subaru|suzuki|tesla|toyota|vauxhall|volkswagen|vw|volvo)\b"
)


def _vehicles(index: GraphIndex, owners: Iterable[int]) -> set[int]:
    """Those of `owners` whose name or type says a vehicle: "Car", "Family car", "Nissan Leaf | vehicle"."""
    entities = index.entities
    return {o for o in owners if _VEHICLE.search(unaccented(f"{entities[o].name} {entities[o].entity_type}").lower())}


def named_answers(index: GraphIndex, query: str, documents: list[int], user: User | None) -> list[int]:
    """For a question asking the number or the birthday of someone it names (not by role: those are read whole),
    their notes that answer it, wherever they rank: "087 445 2210" shares nothing with "what's the plumber's number",
    which finds "Joe Kinsella: Plumber, boiler service"; and for one asking the user's wedding, the notes of the user
    and their spouse that say it ("Callum Reid: Married 18 August 2016", never read near "our wedding anniversary")."""
    if user is not None and asks_own_wedding(query):
        return _answering_notes(index, sorted(_married(index, user)), says_wedding)
    shape = asked_shape(query)
    if not (shape in (Shape.PHONE, Shape.PLATE) or asks_birth(query)) or asks_through(query):
        return []
    if user is not None and (asks_own_birth(query) or any(kinship.names_a_role(w) for w in possessed(query))):
        return []
    owners = _named(index, documents, _names_in(query, shape))
    if shape is Shape.PLATE and not owners:  # "what's my number plate": "Car: 2022 Suzuki Swift, reg CA 778-215"
        owners = _vehicles(index, range(len(index.entities)))
    return _answering_notes(index, sorted(owners), lambda note: _answers(note, shape))


def _answering_notes(index: GraphIndex, owners: list[int], answers: Callable[[str], bool]) -> list[int]:
    """The notes of `owners` that `answers` accepts, at most NAMED_AT_MOST an entity: more is a list ("Contacts"),
    none of whose numbers the question names."""
    starts, counts = index.name_doc, index.documents.counts
    found = []
    for owner in owners:
        own = range(int(starts[owner]), int(starts[owner] + counts[owner]))
        answering = list(itertools.islice((d for d in own if answers(index.observations[d] or "")), NAMED_AT_MOST + 1))
        if len(answering) <= NAMED_AT_MOST:
            found += answering
    return found


def _married(index: GraphIndex, user: User) -> set[int]:
    """The entities whose notes say the user's wedding: the user's, their spouse's (or, with none, their
    ex-spouse's: "Ex-husband; married 2014-12-06"), and a "Wedding" or "Anniversary" of no one's ("Niamh's wedding")."""
    said = {n: {kind for role in roles for kind, _ in kinship.named_in(role)} for n, roles in user.roles.items()}
    spouses = {n for n, kinds in said.items() if "spouse" in kinds} or {n for n, k in said.items() if "ex spouse" in k}
    named = index.names.holders("wedding") + index.names.holders("anniversary")
    ours = {n for n in named if _OURS.match(index.entities[n].name.strip())}
    return set(user.selves) | spouses | ours
