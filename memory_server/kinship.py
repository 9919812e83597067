"""Kinship words: which relative a word names ("mum": a parent, "daughter": a child) and whether a role fits it.

A question names a relative by a kinship word ("my daughter's birthday", "what does my mum do"); the memory calls
them by another ("child", "parent of", "married to", "Aoife's mother"). A static model puts every kinship word near
every other ("daughter" is as near "parent" as "child"), so a question about a daughter also reached the user's
mother. Kinship terms are a small closed class of English, so they are listed here: the kind of relative each
names, and the sex it says, if any (a "son" is no daughter; a "child" may be).
"""

from __future__ import annotations

from collections.abc import Iterable

# word -> (kind of relative, sex it says: "f", "m" or "" for either)
_KIN: dict[str, tuple[str, str]] = {}
for _kind, _words in {
    "parent": "parent parents mother:f mum:f mom:f mam:f mommy:f mummy:f mama:f father:m dad:m daddy:m papa:m "
    "stepmother:f stepfather:m stepparent",
    "child": "child children kid kids son:m sons:m daughter:f daughters:f stepson:m stepdaughter:f stepchild baby",
    "spouse": "spouse wife:f husband:m married partner boyfriend:m girlfriend:f fiance:m fiancee:f fiancé:m "
    "fiancée:f",
    "sibling": "sibling siblings brother:m brothers:m sister:f sisters:f",
    "grandparent": "grandparent grandparents grandmother:f grandma:f granny:f nan:f nana:f grandfather:m grandpa:m "
    "granddad:m grandad:m",
    "grandchild": "grandchild grandchildren grandson:m granddaughter:f",
    "aunt or uncle": "aunt:f auntie:f uncle:m",
    "niece or nephew": "niece:f nephew:m",
    "cousin": "cousin cousins",
}.items():
    for _entry in _words.split():
        _word, _, _sex = _entry.partition(":")
        _KIN[_word] = (_kind, _sex)

SAME = 1.0  # a role that says the very relative asked for ("mother" for "mum", "daughter" for "daughter")
KIND = 0.9  # a role of that kind that does not say the sex ("child" for "daughter")


def kin(word: str) -> tuple[str, str] | None:
    """The kind of relative a word names and the sex it says ("mum": ("parent", "f")), or None."""
    return _KIN.get(word)


def role_fit(word: str, roles: Iterable[str]) -> float | None:
    """How well the roles an entity has for the user fit a kinship `word` of a question: SAME, KIND, or 0.0 (their
    kinship words say another relative: a parent for "daughter", a son for "daughter"); None when `word` is no
    kinship word or the roles hold none, so the embedding decides."""
    asked = kin(word)
    if asked is None:
        return None
    said = [found for role in roles for found in map(kin, role.split()) if found is not None]
    if not said:
        return None
    kind, sex = asked
    sexes = {other_sex for other_kind, other_sex in said if other_kind == kind}
    if not sexes:
        return 0.0
    if not sex or sex in sexes:
        return SAME
    return 0.0 if sexes - {""} else KIND  # a son is no daughter; a child may be
