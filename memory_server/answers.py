"""The shape of the answer a question asks for, read from its question words, and whether a note has that shape.

Terse notes rarely share a word with the question they answer: "how old am I" is answered by "b. 3 Aug 1990",
"when is choir" by "Wed 7:30pm", "what's the plumber's number" by "087 445 2210". What they share is the shape
of the answer: a wh-word asks for a date, a time, a place or a number, and a note either holds one or not. Only
the shape is read here; which notes are weighed by it is the ranker's business (memory_server.search).

Month and weekday names come from the standard library's `calendar` (English names and abbreviations), so
"3 Aug", "Tue 5pm" and "since 2019" are dates without a hand-kept list; they count capitalised only ("May 2026",
not "I may go"). Job titles ("what does my husband do": "Midwife, Rotunda Hospital") come from WordNet, read once
into occupations.txt by scripts/build_occupations.py.
"""

from __future__ import annotations

import calendar
import re
from enum import Enum

from memory_server.kinship import kin
from memory_server.lexical import FIRST_PERSON, words
from memory_server.occupations import singular, titles


class Shape(Enum):
    DATE = "date"  # a day, month, year, weekday or time of day
    TIME = "time"  # a time of day or a weekday
    PLACE = "place"  # a proper name: "Strandhill Rd, Sligo", "Melbourne since 2019" is not one (first word)
    PHONE = "phone"  # a phone number: "Mobile 087 445 2210", "WhatsApp +233 20 555 0134"
    PLATE = "plate"  # a vehicle's registration: "reg MA19 KXP", "211-D-4471", "rego NBK217"
    NUMBER = "number"  # any figure: an amount, a plate, an ID
    OCCUPATION = "occupation"  # a job title, or words that say a job ("works as", "runs a", "retired")


# Question words and what they ask for, first match wins ("what time" before "what"); multi-word cues are phrases.
# "job" asks for one when someone's ("what's my sister's job"), not a task's ("why does the Windows CI job fail").
_ASKS = (
    (("how old", "birthday", "born", "what year", "what date", "how long ago"), Shape.DATE),
    (("what time", "what day", "which day", "which days", "how often"), Shape.TIME),
    (("when",), Shape.DATE),
    (("where",), Shape.PLACE),
    (("how much", "how many"), Shape.NUMBER),  # an amount or a count, of phones and plates too
    # a vehicle's plate is no amount ("what's my number plate": not the phone numbers of the user's notes), or
    # another registration's ("my nursing registration number": "Registration #0412557"); "license plate" has "plate"
    (("number plate", "plate number", "licence plate", "plate", "reg", "rego", "registration number"), Shape.PLATE),
    # someone's number is their phone's ("whats bryce's number", "the number for the GP"); "my IRD number" is not
    (("phone", "mobile", "cell", "telephone", "whatsapp", "s number", "my number", "the number for"), Shape.PHONE),
    (("how much", "how many", "number", "cost", "price", "rate"), Shape.NUMBER),
    (
        (
            "for a living",
            "for work",
            "line of work",
            "s job",
            "my job",
            "his job",
            "her job",
            "their job",
            "your job",
            "what job does",
            "what job did",
            "current job",
            "new job",
            "day job",
            "job title",
            "profession",
            "occupation",
            "career",
            "work as",
        ),
        Shape.OCCUPATION,
    ),
)
_REACH = re.compile(r"\bhow (?:do|can|could|should) (?:i|we) (?:reach|contact|get hold of|get in touch with)\b")
# "what does my husband do", "what did Dad do": a question that ends on its verb "do" asks what someone does
_DOES = re.compile(r"^(?:what|wat) (?:does|did|do) .+ do$")
# Words that say a job where no title does: "Works as an architect", "Runs a small bookshop", "Owns Delgado Auto
# Body", "Owns a bakery", "Head of Science", "Retired in 2019"; not "Retired the old laptop" (a thing retired) nor
# "Owns a dog named Bran" (a thing owned: a business is named, or a word says one), nor "Runs the choir", "runs the
# unit tests" (the bench's "runs the" are mostly not jobs)
_ARTICLE = r"(?:the|a|an|my|his|her|our|their|its)"
_BUSINESS = (
    r"(?:business|company|firm|shop|store|restaurant|cafe|bakery|bar|pub|salon|garage|practice|farm|agency|studio)"
)
_JOB_WORDS = re.compile(
    r"\b(?:works? (?:as|at|for|in)|runs (?:a|an|his|her|their)|founded|head of|self-employed"
    rf"|owns(?! {_ARTICLE}\b)|owns {_ARTICLE}(?: \w+){{0,2}} {_BUSINESS}|retired(?! {_ARTICLE}\b))\b"
)
# A title held by someone else ("Married to a doctor", "Friend of the baker", "a documentary about pilots", "Training
# for new analysts"; a bare word between "to" and a title is the subject's new job: "Promoted to lead developer"), and
# a plural title opening a note before an article, a verb ("Cooks a roast every Sunday")
_OTHERS = re.compile(rf"(?:\babout|\bto {_ARTICLE}|\b(?:for|of|with)(?: {_ARTICLE}| \w+)) $")
_VERB = re.compile(rf"^ {_ARTICLE}\b")

MONTHS = {name.lower() for name in [*calendar.month_name, *calendar.month_abbr] if name} | {"sept"}
_DAYS = {name.lower() for name in [*calendar.day_name, *calendar.day_abbr] if name} | {"tues", "thur", "thurs"}
_CLOCK = re.compile(r"\b\d{1,2}(?::\d{2}\s*(?:am|pm)?|\s*(?:am|pm))\b|\b\d{1,2}h\d{0,2}\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")
_DIGIT = re.compile(r"\d")
# Seven to fifteen digits in groups ("021 448 902", "(09) 255 0110", "+33 6 12 58 33 71"); not an amount
# ("€1 250 000"), a date ("2025-08-14", "22.10.1949"), years from and to ("2010 - 2015") or hours ("10.30-12.00")
_PHONE = re.compile(r"(?<![\w/.,$\u00a3\u20ac])\+?\(?\d[\d ().-]{5,}\d(?![\w/,]| ?[$\u00a3\u20ac])")
_NOT_PHONE = re.compile(
    r"(?:19|20)\d\d[-./ ](?:\d\d[-./ ]\d\d|(?:19|20)\d\d)|\b\d\d?([.-])\d\d?\1(?:19|20)\d\d\b"
    r"|(?:19|20)\d\d ?[-\u2013] ?(?:19|20)\d\d\b|\d[.:]\d\d ?[-\u2013] ?\d"
)
# A plate: the word ("reg", "rego", "plate", "registration"), or two to four groups of capitals and digits holding
# both, five to nine of them ("211-D-4471", "MA19 KXP", "NBK217", "CA 112-340"; not "INV-2026-004", "B111", "TDI")
_PLATE_WORD = re.compile(r"\b(?:reg|rego|registration|plates?)\b", re.IGNORECASE)
_PLATE = re.compile(r"(?<![\w/.:-])[A-Z0-9]{1,7}(?:[ -][A-Z0-9]{1,4}){0,3}(?![\w/.:-])")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")  # "May 2026", "Tue 5pm"; not "may" or "the sun"
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z][\w'-]*")
_BIRTH_WORDS = "born|birthday|bday|birthdate|date of birth|dob"  # what asks a birth, and what says one
_OWN_BIRTH = re.compile(rf"\bhow old am i\b|\b(?:was|am) i born\b|\bmy (?:age|birth(?! cert)|{_BIRTH_WORDS})\b")
_CLAUSE = re.compile(r"[,;:(]")
_WEDDING = re.compile(r"\b(?:wedding|anniversary|anniv|married|marriage)\b")
# (not another marriage of the spouse's: "First marriage to Thomas Roche (2010-2018)")
_SAYS_WEDDING = re.compile(r"(?<!first )(?<!previous )(?<!former )\b(?:married|wedding|marriage)\b", re.IGNORECASE)
_KIN_NAMED = re.compile(r"\b([A-Za-z]+)\s+[A-Z][a-z]")  # a word before a name: "Daughter Ana", "son Vili"
_ASKS_BIRTH = re.compile(rf"\bhow old\b|\b(?:{_BIRTH_WORDS})\b")
_BIRTHPLACE = re.compile(r"\bwhere\b|\b(?:what|which) (?:hospital|city|town|country|place)\b")  # "where was Vili born"
_BIRTH = re.compile(rf"\b(?:{_BIRTH_WORDS}|d\.o\.b)\b|(?:^|[\s(,;])b\.\s?\d", re.IGNORECASE)


def asked_shape(question: str) -> Shape | None:
    """The shape of answer a question asks for, from its question words; None when it does not say."""
    said = " ".join(words(question))
    text = f" {said} "
    for cues, shape in _ASKS:
        if any(f" {cue} " in text for cue in cues):
            return shape
    return Shape.OCCUPATION if _DOES.match(said) else None


def asks_own_birth(question: str) -> bool:
    """Whether a question asks the user's birth or age: "how old am I", "when's my birthday", "when was I born",
    "what's my date of birth", "where was I born" (a note that says a birth says where, if any does); not "how old
    is my son", "my birth certificate"."""
    return _OWN_BIRTH.search(" ".join(words(question))) is not None


def asks_own_wedding(question: str) -> bool:
    """Whether a question asks the date of the user's own wedding: "when's our wedding anniversary", "when did we get
    married", "how long have I been married"; not "when is Niamh's wedding", "whose wedding am I going to", "when is
    my brother getting married"."""
    said = words(question)
    text = " ".join(said)
    wedding = _WEDDING.search(text)
    if not wedding or "whose" in said or FIRST_PERSON.isdisjoint(said):
        return False
    if any(kin(word) and kin(word)[0] not in ("spouse", "ex spouse") for word in said):  # "my brother": his wedding
        return False
    before = text[: wedding.start()].split()
    if before and before[-1] == "s":  # "Steve's wedding"
        return False
    return asked_shape(question) in (Shape.DATE, Shape.TIME) or "how long" in text or "date" in said


def says_wedding(note: str) -> bool:
    """Whether a note says when its entity married: "Married 18 August 2016, Manchester Town Hall", "Ex-husband;
    married 2014-12-06", "Wedding anniversary is on 20 June"; not another's ("Niamh's wedding 21 Feb 2026"), nor a
    marriage without a date ("Married to Mandla Zulu")."""
    return has_shape(note, Shape.DATE) and any(_own(note[: m.start()]) for m in _SAYS_WEDDING.finditer(note))


def asks_birth(question: str) -> bool:
    """Whether a question asks someone's birth or age: "when is Noah's birthday", "how old is my son", "whens noahs
    bday"; not "where's my birth certificate", nor where they were born."""
    said = " ".join(words(question))
    return _ASKS_BIRTH.search(said) is not None and not _BIRTHPLACE.search(said)  # where is a place, not a date


def says_birth(note: str) -> bool:
    """Whether a note says when its entity was born: "Born 9 April 1989", "b. 3 Aug 1990", "Birthday 12 May",
    "Amina's son, born 30/04/2016"; not another's, named before it in its clause ("Mum's birthday 3 May", "Daughter
    Ana born 2019"), nor a birthday without a date ("for his 16th birthday")."""
    dated = has_shape(note, Shape.DATE)
    return any(
        (dated or _DIGIT.search(note[found.end() : found.end() + 12])) and _own(note[: found.start()])
        for found in _BIRTH.finditer(note)
    )


def _own(before: str) -> bool:
    """Whether the text before a birth says it is another's: a possessive or a kinship word in its clause ("Mum's",
    "son"), or a relative named before it ("Daughter Ana, born 2019": the user's note)."""
    if any(kin(m.group(1).lower()) for m in _KIN_NAMED.finditer(before)):
        return False
    return not any(word == "s" or kin(word) for word in words(_CLAUSE.split(before)[-1]))


def asks_to_reach(question: str) -> bool:
    """Whether a question asks how to reach someone or something ("how do I reach Léa's mom", "how can we contact
    the landlord"): of a person, their number answers it; of a place, the way there ("how do I reach the campsite")."""
    return bool(_REACH.search(question.lower()))


def asking_words(shape: Shape) -> frozenset[str]:
    """The words of the cues that ask for `shape` ("job", "living"): what a question asks, never whom it asks about."""
    return frozenset(word for cues, asked in _ASKS if asked is shape for cue in cues for word in cue.split())


def has_shape(note: str, shape: Shape) -> bool:
    """Whether a note holds an answer of `shape`."""
    if shape is Shape.NUMBER:
        return bool(_DIGIT.search(note))
    if shape is Shape.PHONE:
        return any(_is_phone(m.group(0)) for m in _PHONE.finditer(note))
    if shape is Shape.PLATE:
        return bool(_PLATE_WORD.search(note)) or any(_is_plate(m.group(0)) for m in _PLATE.finditer(note))
    if shape is Shape.OCCUPATION:
        return _names_a_job(note)
    if shape is Shape.PLACE:
        return bool(_NAME.search(note.strip()))
    said = {word.lower() for word in _CAPITALISED.findall(note)}
    when_in_week = bool(_CLOCK.search(note)) or not said.isdisjoint(_DAYS)
    if shape is Shape.TIME:
        return when_in_week
    return when_in_week or bool(_YEAR.search(note)) or not said.isdisjoint(MONTHS)


def _is_phone(digits: str) -> bool:
    return 7 <= len(_DIGIT.findall(digits)) <= 15 and not _NOT_PHONE.search(digits)


def _is_plate(text: str) -> bool:
    characters = text.replace(" ", "").replace("-", "")
    return 5 <= len(characters) <= 9 and not characters.isdigit() and not characters.isalpha()


def _names_a_job(note: str) -> bool:
    """Whether a note says a job: a title of occupations.txt (one to three words, the last maybe plural: "nurses"),
    or words that say one (`_JOB_WORDS`)."""
    said = words(note)
    if _JOB_WORDS.search(" ".join(said)):
        return True
    return any(_holds(said, start, size) for size in (1, 2, 3) for start in range(len(said) - size + 1))


def _holds(said: list[str], start: int, size: int) -> bool:
    """Whether `size` words of a note from `start` are a title its subject holds: not another's ("Married to a
    doctor") nor a verb ("Cooks a roast")."""
    known = titles()
    last = said[start + size - 1]
    if " ".join([*said[start : start + size - 1], singular(last)]) not in known:
        return False
    before, after = " ".join(["", *said[:start], ""]), " ".join(["", *said[start + size :]])
    verb = start == 0 and size == 1 and last not in known and _VERB.match(after)
    return not verb and not _OTHERS.search(before)
