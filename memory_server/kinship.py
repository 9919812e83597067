"""Kinship words: which relative a word names ("mum": a parent, "daughter": a child) and whether a role fits it.

A question names a relative by a kinship word ("my daughter's birthday", "what does my mum do"); the memory calls
them by another ("child", "parent of", "married to", "Aoife's mother"). A static model puts every kinship word near
every other ("daughter" is as near "parent" as "child"), so a question about a daughter also reached the user's
mother. Kinship terms are a small closed class of English, so they are listed here: the kind of relative each
names, and the sex it says, if any (a "son" is no daughter; a "child" may be).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memory_server.lexical import words
from memory_server.occupations import is_title

# word -> (kind of relative, sex it says: "f", "m" or "" for either)
_KIN: dict[str, tuple[str, str]] = {}
for _kind, _words in {
    "parent": "parent parents mother:f mum:f mom:f mam:f mommy:f mummy:f mama:f father:m dad:m daddy:m papa:m",
    "child": "child children kid kids son:m sons:m daughter:f daughters:f baby",
    "step parent": "stepmother:f stepfather:m stepparent",  # not the parent ("my mum" is not the stepmother)
    "step child": "stepson:m stepdaughter:f stepchild",
    "spouse": "spouse wife:f husband:m married partner boyfriend:m girlfriend:f fiance:m fiancee:f fiancé:m fiancée:f",
    "sibling": "sibling siblings brother:m brothers:m sister:f sisters:f",
    "grandparent": "grandparent grandparents grandmother:f grandma:f granny:f nan:f nana:f grandfather:m grandpa:m "
    "granddad:m grandad:m",
    "grandchild": "grandchild grandchildren grandson:m granddaughter:f",
    "aunt or uncle": "aunt:f auntie:f uncle:m",
    "niece or nephew": "niece:f nephew:m",
    "cousin": "cousin cousins",
    "godparent": "godparent godparents godmother:f godfather:m",
    "godchild": "godchild godchildren godson:m goddaughter:f",
}.items():
    for _entry in _words.split():
        _word, _, _sex = _entry.partition(":")
        _KIN[_word] = (_kind, _sex)
_KIN["ex"] = ("ex spouse", "")  # "my ex", alone; before a word it makes former, that word says who (_ex_alone)

# Words that name a child only as someone's ("Rafa's boy", "my sister's girls"), never alone ("birthday girl")
_CHILD_AS_THEIRS = {"boy": "son", "boys": "sons", "girl": "daughter", "girls": "daughters"}

# The relative at the other end of each kind: the user "husband of" Roisin makes Roisin the user's spouse.
_CONVERSE = {
    "parent": "child", "child": "parent", "step parent": "step child", "step child": "step parent",
    "spouse": "spouse", "ex spouse": "ex spouse", "sibling": "sibling",
    "grandparent": "grandchild", "grandchild": "grandparent",
    "aunt or uncle": "niece or nephew", "niece or nephew": "aunt or uncle", "cousin": "cousin",
    "godparent": "godchild", "godchild": "godparent",
    "parent in law": "child in law", "child in law": "parent in law", "sibling in law": "sibling in law",
}  # fmt: skip
# The words of the spouse's relatives as the user's in-laws, by kind and sex
_IN_LAW = {
    "parent": {"f": "mother", "m": "father", "": "parent"},
    "sibling": {"f": "sister", "m": "brother", "": "sibling"},
}
# A word before a kinship word that makes it another relative ("ex-wife", "step-mother", "business partner"), and
# for "partner" the only words that keep it a spouse ("life partner", and a possessive: "my partner", "Cian's").
_NOT_NOW = frozenset({"ex", "former"})
_EX_JOINED = re.compile(r"\bex-(?=\w)", re.IGNORECASE)  # "ex-" joined to a word: always that word's (_spoken)
# The people, besides relatives and job titles, an "ex" before them makes former ones: "my ex flatmate" is no ex-spouse
_EX_OF = frozenset(
    "colleague colleagues coworker coworkers flatmate flatmates housemate housemates roommate roommates neighbour "
    "neighbours neighbor neighbors landlord landlady friend friends teammate teammates classmate classmates".split()
)
_LIFE = frozenset({"life", "domestic", "civil", "romantic", "my", "our", "your", "his", "her", "their", "s"})

SAME = 1.0  # a role that says the very relative asked for ("mother" for "mum", "daughter" for "daughter")
KIND = 0.9  # a role of that kind that does not say the sex ("child" for "daughter")


def kin(word: str) -> tuple[str, str] | None:
    """The kind of relative a word names and the sex it says ("mum": ("parent", "f")), or None."""
    return _KIN.get(word)


def names_a_role(word: str) -> bool:
    """Whether a word names someone by what they are: a relative ("mum") or a job title ("dentist")."""
    return kin(word) is not None or is_title(word)


def as_theirs(word: str) -> str:
    """The kinship word a word after a possessive says: "son" for "boy" ("Rafa's boy"); any other word itself."""
    return _CHILD_AS_THEIRS.get(word, word)


def of_kind(asked: str) -> list[str]:
    """The kinship words that name a relative of the kind `asked` names, of no other sex (`same_relative`)."""
    return [word for word in _KIN if same_relative(word, asked)]


def same_relative(word: str, asked: str) -> bool:
    """Whether a kinship `word` names a relative of the kind `asked` names, of no other sex ("kids" for "son",
    not "daughter")."""
    said, wanted = kin(word), kin(asked)
    if said is None or wanted is None or said[0] != wanted[0]:
        return False
    return not (said[1] and wanted[1]) or said[1] == wanted[1]


def converse(role: str) -> str | None:
    """The relative at the other end of a role whose last word is a kinship word ("husband": "spouse", "younger
    brother": "sibling", "step mother": "step child"), as words `kin` reads: what the other is when the user is the
    `role` of them; None for another role ("boss", "business partner", "mother in law")."""
    parts = role.split()
    said = _said(role) if parts and kin(parts[-1]) else []
    return _CONVERSE[said[-1][0]] if said and len(said) == len(_kinship_words(parts)) else None


def in_law(role: str) -> str | None:
    """What the relative a role names to the user's spouse is to the user: "mother in law" for the spouse's "mum",
    "parent in law" for their "parent", "brother in law" for their "brother"; None for another relative."""
    said = _said(role)
    if not said:
        return None
    kind, sex = said[-1]
    word = _IN_LAW.get(kind, {}).get(sex)
    return f"{word} in law" if word else None


def named_in(question: str) -> list[tuple[str, str]]:
    """The relatives a question names, as `kin` gives them, but for the qualified ones ("where does my ex-wife live"
    names no wife; "my mother-in-law" names a parent in law)."""
    return _said(" ".join(_spoken(question)))


def _spoken(question: str) -> list[str]:
    """A question's words, "ex-" read as "former": joined to a word, it always makes that one former ("my ex-tenant",
    "my ex-business partner", "ex-directory"), whatever the word; "my ex" alone is the ex-spouse (`_relatives`)."""
    return words(_EX_JOINED.sub("former ", question))


def relatives_in(question: str) -> dict[str, tuple[str, str]]:
    """Each kinship word of a question with the relative it names there ("mother": a parent, or in "my mother in
    law" a parent in law); the qualified ones left out ("wife" in "my ex-wife")."""
    return dict(_relatives(_spoken(question)))


def qualified(question: str) -> frozenset[str]:
    """The kinship words a question says of another relative than they name alone ("mother" in "where does my
    mother-in-law live", "wife" in "my ex-wife's job"): the user's mother is not the one asked about."""
    parts = _spoken(question)
    return frozenset(_kinship_words(parts)) - {word for word, _ in _relatives(parts)}


def _kinship_words(parts: list[str]) -> list[str]:
    """The kinship words of `parts`, but an "ex" that names no one (`_ex_alone`)."""
    return [w for n, w in enumerate(parts) if kin(w) and (w != "ex" or _ex_alone(parts, n))]


def _said(role: str) -> list[tuple[str, str]]:
    """The relatives a role says, by its kinship words, as `kin` gives them; a qualified one says another relative
    or none ("mother in law": a parent in law, "ex wife": an ex spouse, "business partner": none; "step mother": a
    step parent)."""
    return [said for _, said in _relatives(role.split())]


def _relatives(parts: list[str]) -> list[tuple[str, tuple[str, str]]]:
    """`_said`'s relatives, each with the kinship word that says it."""
    found = []
    for n, word in enumerate(parts):
        said = kin(word)
        before = parts[n - 1] if n else ""
        if said is None or (word == "ex" and not _ex_alone(parts, n)):
            continue
        if before in _NOT_NOW:  # "ex-wife", "former husband": an ex-spouse; an ex of another kind is none
            if said[0] == "spouse":
                found.append((word, ("ex spouse", said[1])))
            continue
        if parts[n + 1 : n + 3] == ["in", "law"]:  # the spouse's relative ("mother in law"), or a child's spouse
            said = (said[0] + " in law", said[1]) if said[0] + " in law" in _CONVERSE else None
        if word == "partner" and before and before not in _LIFE:
            continue
        if before == "step" and not said[0].startswith("step"):
            said = ("step " + said[0], said[1]) if "step " + said[0] in _CONVERSE else None
        if said is not None:
            found.append((word, said))
    return found


def _ex_alone(parts: list[str], at: int) -> bool:
    """Whether the "ex" at `at` names the ex-spouse: said as theirs ("my ex", "my ex's girlfriend", "when does my ex
    pick up the kids"), not before the one it makes former ("my ex wife", "my ex boss", "my ex flatmate"; "ex VAT")."""
    following = parts[at + 1 : at + 2]
    qualifies = bool(following) and (names_a_role(following[0]) or following[0] in _EX_OF)
    return at > 0 and parts[at - 1] in ("my", "our") and not qualifies


def role_fit(word: str, roles: Iterable[str], asked: tuple[str, str] | None = None) -> float | None:
    """How well the roles an entity has for the user fit a kinship `word` of a question, naming the relative
    `asked` (default: as `kin` reads the word alone; "mother" in "my mother in law" names a parent in law): SAME,
    KIND, or 0.0 (their kinship words say another relative: a parent for "daughter", a son for "daughter", a parent
    in law for "kids"); None when `word` is no kinship word or the roles hold none, so the embedding decides."""
    asked = asked or kin(word)
    if asked is None:
        return None
    said = [found for role in roles for found in _said(role)]
    if not said:
        return None
    kind, sex = asked
    sexes = {other_sex for other_kind, other_sex in said if other_kind == kind}
    if not sexes:
        return 0.0
    if not sex or sex in sexes:
        return SAME
    return 0.0 if sexes - {""} else KIND  # a son is no daughter; a child may be
