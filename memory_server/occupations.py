"""Job titles: the English nouns that name an occupation ("dentist", "boss", "midwife"), read from WordNet once,
at build time, into occupations.txt by scripts/build_occupations.py. A question names a person by one ("my
dentist's number"), a note says a job by one ("Midwife, Rotunda Hospital")."""

from __future__ import annotations

import functools
from pathlib import Path

from memory_server.lexical import words


def is_title(word: str) -> bool:
    """Whether a word is a job title of occupations.txt ("dentist", "boss"; "nurses" too)."""
    return singular(word.lower()) in titles()


def singular(word: str) -> str:
    """A plural's singular as WordNet's lemmas have it ("nurses", "bosses"; "midwives" stays: not a title then).
    Not a stemmer: Snowball makes "Townes" (a physicist in WordNet) of "town"."""
    known = titles()
    if word in known or not word.endswith("s"):
        return word
    if word[:-1] in known:  # "nurses" -> "nurse"
        return word[:-1]
    if word.endswith("es") and word[:-2] in known:  # "bosses" -> "boss"; "days" is no "da" (district attorney)
        return word[:-2]
    return word


@functools.cache
def titles() -> frozenset[str]:
    """The job titles of occupations.txt, each as its words joined by spaces."""
    lines = (Path(__file__).with_name("occupations.txt").read_text(encoding="utf-8")).splitlines()
    return frozenset(" ".join(words(line)) for line in lines if line and not line.startswith("#"))
