"""Words to search terms, and BM25 over them.

Terms are lower-cased words without stop words, reduced by the Snowball English stemmer (PyStemmer, the Snowball
project's C binding: "lives", "live" and "living" all become "live"), the same for documents and queries.
"""

from __future__ import annotations

import functools
import itertools
import re
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import Stemmer

from memory_server.joined import unaccented
from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

_K1, _B = 1.2, 0.4  # a milder length normalisation than the textbook 0.75 suits short observations

_WORD = re.compile(r"\w+")
_STEMMER = Stemmer.Stemmer("english")
# Function words and the pieces a contraction leaves ("what's" -> "what", "s"). Pronouns are here too: "I" and
# "my" say who a question is about, which the ranker reads from the query itself (see FIRST_PERSON).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves s t d ll m re ve don didn doesn isn
    wasn weren""".split()
)
FIRST_PERSON = frozenset("i me my mine myself we us our ours ourselves".split())


# Chat shorthand for words a memory spells out ("steve's bday": "Birthday 4 May"): neither model reads it as the
# word, and the question-word cues (memory_server.answers) would miss it. Only unambiguous ones ("mob" is a crowd,
# "GF" gluten-free: "GF options nearby" found the girlfriend).
_SHORTHAND = {
    "bday": "birthday", "bdays": "birthdays", "b-day": "birthday", "hubby": "husband", "appt": "appointment",
    "appts": "appointments", "tmrw": "tomorrow", "anniv": "anniversary", "bro": "brother", "sis": "sister",
    # and a part for the note that holds it: a postcode is written in an address ("Address: 31 Ivygreen Rd, M21 9FF"),
    # a plate beside "reg" ("reg MA19 KXP"; "number" alone finds phone numbers)
    "postcode": "address", "postal code": "address", "zip code": "address", "zipcode": "address",
    "eircode": "address", "number plate": "reg", "plate number": "reg", "licence plate": "reg", "license plate": "reg",
}  # fmt: skip
_SHORT = re.compile(
    r"\b(?:" + "|".join(sorted(map(re.escape, _SHORTHAND), key=len, reverse=True)) + r")\b", re.IGNORECASE
)


def spelled_out(text: str) -> str:
    """`text` with chat shorthand written out after it ("whens noahs bday": "whens noahs bday birthday"; a note may
    say "bday" too)."""
    return _SHORT.sub(lambda m: f"{m.group(0)} {_SHORTHAND[m.group(0).lower()]}", text)


def words(text: str) -> list[str]:
    """Lower-cased words, as the terms and the first-person test see them."""
    return _WORD.findall(text.lower())


def tokenize(text: str) -> list[str]:
    """The search terms of a text: its words without stop words or accents, stemmed ("Siobhan" finds "Siobhán"),
    the calendar's abbreviations written out ("Mon + Wed" finds "monday")."""
    return [stem(w) for w in _calendar_spelled_out(words(unaccented(text))) if w not in STOPWORDS]


# Weekdays and months as notes shorten them ("Outdoor practice Mon + Wed", "next check-up 4 Feb") and questions
# seldom do. Those that are also words or names count only beside a figure: "Sat 11am", "12 Jan", not "sat down",
# "Jan Kowalski".
_CALENDAR = {
    "mon": "monday", "tue": "tuesday", "tues": "tuesday", "wed": "wednesday", "thu": "thursday", "thur": "thursday",
    "thurs": "thursday", "fri": "friday", "feb": "february", "apr": "april", "jun": "june", "jul": "july",
    "aug": "august", "sep": "september", "sept": "september", "oct": "october", "nov": "november", "dec": "december",
}  # fmt: skip
# A day of the month as a question says it ("on the 9th") is its figure, as dates write it ("2026-05-09", "9 May")
_CALENDAR |= {
    f"{zero}{day}{suffix}": str(day)
    for day in range(1, 32)
    for zero in ("", "0")
    for suffix in ("", "st", "nd", "rd", "th")
    if (zero or suffix) and not (zero and day > 9)
}
_CALENDAR_BESIDE_FIGURES = {"sat": "saturday", "sun": "sunday", "jan": "january", "mar": "march"}


def _calendar_spelled_out(said: list[str]) -> list[str]:
    def beside_figure(at: int) -> bool:
        return any(0 <= i < len(said) and any(c.isdigit() for c in said[i]) for i in (at - 1, at + 1))

    return [
        _CALENDAR.get(word) or (beside_figure(at) and _CALENDAR_BESIDE_FIGURES.get(word)) or word
        for at, word in enumerate(said)
    ]


def stems(text: str) -> tuple[str, ...]:
    """Every word of a text, stemmed, stop words kept: "Projects" and "project" are one, "my projects" is not."""
    return tuple(map(stem, words(unaccented(text))))


def is_first_person(text: str) -> bool:
    """Whether a question is about the one asking ("where do I live", "our vet", "my boss")."""
    return not FIRST_PERSON.isdisjoint(words(text))


RELATED_WEIGHT = 0.5  # share of a term's BM25 weight that a related word earns (see related_terms)
RELATED_FLOOR = 0.4  # similarity (of centred token vectors) a word needs to stand for a word of the query
RELATED_COUNT = 3  # at most this many related words per word of the query
COMPOUND_WEIGHT = 0.9  # share a word's other spelling earns: "roll back" for "rollback" (see _compounds)
_PARTICLES = ("up", "off", "out", "in", "on", "back", "over", "down")  # "pickup", "dropoff", "login", "rollback"


def related_terms(
    query: str, neighbours: Callable[[str], Sequence[tuple[str, float]]], vocabulary: Mapping[str, int]
) -> dict[str, list[tuple[str, float]]]:
    """For each word of the query, the terms of this memory that stand for it, from `neighbours` (a word's nearest
    words in the embedding model's vocabulary, best first, with their similarity): at most RELATED_COUNT of them,
    each at least RELATED_FLOOR alike, weighted RELATED_WEIGHT times their similarity. So "boss" also finds
    "supervisor" and "husband" finds "married", when the memory uses those words; see LexicalIndex.matches."""
    found: dict[str, list[tuple[str, float]]] = {}
    if not vocabulary:  # an empty memory: nothing to stand for anything (and no need of the model's word list)
        return found
    for word in set(words(unaccented(query))) - STOPWORDS:
        own = stem(word)
        chosen: dict[str, float] = {}
        for other, similarity in neighbours(word):
            if similarity < RELATED_FLOOR or len(chosen) >= RELATED_COUNT:
                break
            candidate = stem(other)
            if candidate != own and candidate in vocabulary and candidate not in chosen:
                chosen[candidate] = RELATED_WEIGHT * similarity
        if chosen:
            found[own] = list(chosen.items())
    for own, term in _compounds(words(unaccented(query)), vocabulary):
        if term != own and term not in dict(found.get(own, ())):
            found.setdefault(own, []).append((term, COMPOUND_WEIGHT))
    return found


def _compounds(said: list[str], vocabulary: Mapping[str, int]) -> Iterable[tuple[str, str]]:
    """(term of the query, term of the memory) for words the memory writes as one that the query writes as two, or
    the other way round: "roll back" for "Rollback: make rollback", "user name" for "username"; "pickup" for "pick
    up", "log in" (a phrasal verb's particle, so "carpet" is not "car" and "pet")."""
    for first, second in itertools.pairwise(said):
        joined = stem(first + second)
        if joined in vocabulary:
            yield from ((stem(w), joined) for w in (first, second) if w not in STOPWORDS)
    for word in set(said) - STOPWORDS:
        own = stem(word)
        if own in vocabulary:
            continue
        for particle in _PARTICLES:
            head = word[: -len(particle)]
            if word.endswith(particle) and len(head) >= 3 and stem(head) in vocabulary:
                yield own, stem(head)


@functools.lru_cache(maxsize=200_000)  # words repeat: indexing a large graph stems each distinct word once
def stem(word: str) -> str:
    """A word's Snowball stem ("lives", "living": "live")."""
    return _STEMMER.stemWord(word)


class LexicalIndex:
    """BM25 over token lists, kept up to date document by document.

    Documents are stored by row: `add` and `remove` take rows, and `arrange` says which row is the document number
    0, 1, 2... of the scores (the search documents' order, see documents.py). The statistics BM25 needs (how many
    documents, how many hold each term, their average length) always describe the documents present, and each
    posting's weight is worked out when a query needs it, so the scores are exactly those of an index built from
    scratch for the same documents, after any sequence of changes.

    Postings live in segments, each sorted by term: the large one built first and a few small ones that changes
    add, merged once there are many (as a search engine's index does), so a change costs what it changed.
    """

    def __init__(self, documents: Sequence[Sequence[str]] = ()) -> None:
        self.vocabulary: dict[str, int] = {}  # the terms of the documents present, with their numbers
        self._numbers: dict[str, int] = {}  # every term seen, present or not
        self._terms: list[str] = []  # by number
        self._document_frequency = np.zeros(0, dtype=np.int64)  # by term number, documents present only
        self._lengths = np.zeros(0, dtype=np.float32)  # tokens of the document in each row
        self._segments: list[_Segment] = []
        self._position: np.ndarray | None = None  # the document number of each row (-1: removed); None: the row
        self.size = 0  # documents present
        self.rows = 0  # rows used, removed documents' included
        self._total_length = 0
        if documents:
            self.add(np.arange(len(documents)), documents)

    def add(self, rows: np.ndarray, documents: Iterable[Sequence[str]]) -> None:
        """Index `documents` (token lists, read once) in `rows`, rows that no document used before."""
        numbers, lengths = array("q"), array("q")
        for tokens in documents:
            numbers.extend(map(self._number, tokens))
            lengths.append(len(tokens))
        if not len(lengths):
            return
        counts = np.frombuffer(lengths, dtype=np.int64)
        self.rows = max(self.rows, int(rows.max()) + 1)
        self._lengths = _grown(self._lengths, self.rows)
        self._lengths[rows] = counts
        self._document_frequency = _grown(self._document_frequency, len(self._terms))
        segment = _Segment.of(np.frombuffer(numbers, dtype=np.int64), np.repeat(rows, counts))
        fresh = segment.terms[self._document_frequency[segment.terms] == 0]
        self._document_frequency[segment.terms] += np.diff(segment.starts)
        self.vocabulary.update((self._terms[n], n) for n in fresh.tolist())
        self.size += len(counts)
        self._total_length += int(counts.sum())
        self._segments.append(segment)
        self._merge_segments()

    def remove(self, rows: np.ndarray, documents: Sequence[Sequence[str]]) -> None:
        """Forget the documents in `rows`, whose tokens were `documents` (their postings stay until `renumber`, but
        count for nothing)."""
        if not len(rows):
            return
        distinct = np.concatenate(
            [np.unique(np.fromiter((self._numbers[t] for t in tokens), np.int64, len(tokens))) for tokens in documents]
        )
        terms, counts = np.unique(distinct, return_counts=True)
        self._document_frequency[terms] -= counts
        for number in terms[self._document_frequency[terms] == 0]:
            del self.vocabulary[self._terms[number]]
        self.size -= len(rows)
        self._total_length -= int(self._lengths[rows].sum(dtype=np.int64))

    def arrange(self, rows: np.ndarray | None) -> None:
        """Number the documents present: `rows[d]` holds document d (None: each row holds the document of its
        number, and no row is unused)."""
        if rows is None:
            self._position = None
            return
        self._position = np.full(self.rows, -1, dtype=np.int64)
        self._position[rows] = np.arange(len(rows))

    def renumber(self, new_row: np.ndarray) -> None:
        """Move each row r to `new_row[r]` (-1: a removed document's row, whose postings are dropped)."""
        parts = []
        for segment in self._segments:
            terms = np.repeat(segment.terms, np.diff(segment.starts))
            docs = new_row[segment.docs]
            kept = docs >= 0
            parts.append((terms[kept], docs[kept], segment.frequencies[kept]))
        self.rows = int(new_row.max()) + 1 if len(new_row) else 0
        lengths = np.zeros(self.rows, dtype=np.float32)
        moved = new_row >= 0
        lengths[new_row[moved]] = self._lengths[: len(new_row)][moved]
        self._lengths = lengths
        self._segments = [_Segment.joined(parts)] if parts else []
        self._position = None
        for term in [t for t, n in self._numbers.items() if self._document_frequency[n] == 0]:
            del self._numbers[term]  # its number stays unused: numbers index the arrays

    def scores(self, query: str) -> np.ndarray:
        """BM25 per document, divided by the best score the query could reach, so 1.0 means every word matched."""
        return self.matches(query, {})[0]

    def matches(
        self, query: str, alternatives: Mapping[str, Sequence[tuple[str, float]]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 per document counting `alternatives`, and without them, each divided by the best score the query
        could reach (1.0: every word matched).

        `alternatives` maps a term of the query to other terms that may stand for it, each with a weight below 1
        ("boss" -> "supervisor" 0.25): a document holding one of them earns that share of what it would earn with
        the term itself (the best of them, not their sum). A term the memory lacks still counts in the best
        reachable score when an alternative of it is present, as its rarest possible self, so a match through an
        alternative never looks like a full match."""
        total = np.zeros(self.size, dtype=np.float32)
        exact = total
        best = 0.0
        for term in dict.fromkeys(tokenize(query)):  # in the query's order: sums of floats, the same in every run
            index = self.vocabulary.get(term)
            others = [
                (self.vocabulary[other], weight)
                for other, weight in alternatives.get(term, ())
                if other in self.vocabulary and other != term
            ]
            if others and exact is total:
                exact = total.copy()
            if index is not None:
                best += float(self.idf(index)) * (_K1 + 1)
                docs, gains = self.postings(index)
                if exact is not total:
                    exact[docs] += gains
                if not others:
                    total[docs] += gains
                    continue
            elif not others:
                continue
            else:
                best += float(np.log1p((self.size + 0.5) / 0.5)) * (_K1 + 1)
            group = ([(index, 1.0)] if index is not None else []) + others
            chosen = np.zeros(self.size, dtype=np.float32)  # per document, the best gain of the group
            for number, weight in group:
                np.maximum.at(chosen, *self.postings(number, weight))
            total += chosen  # adding 0.0 changes no other document: a dense pass costs less than sorting postings
        if best > 0:
            total /= best
            if exact is not total:
                exact /= best
        return total, exact

    def idf(self, index: int) -> np.float32:
        """The inverse document frequency of the term numbered `index`."""
        frequency = self._document_frequency[index]
        return np.float32(np.log1p((self.size - frequency + 0.5) / (frequency + 0.5)))

    def postings(self, index: int, share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """The documents holding the term numbered `index`, and what it adds to each one's score (idf x weight,
        times `share` for a term standing for another)."""
        docs, gains = [], []
        idf = self.idf(index) * share
        average = self._total_length / self.size if self.size else 1.0
        for segment in self._segments:
            start, end = segment.find(index)
            if start == end:
                continue
            rows = segment.docs[start:end]
            frequency = segment.frequencies[start:end]
            norm = _K1 * (1 - _B + _B * self._lengths[rows] / max(average, 1e-9))
            weight = (frequency * (_K1 + 1) / (frequency + norm)).astype(np.float32)
            if self._position is not None:
                rows = self._position[rows]
                present = rows >= 0
                rows, weight = rows[present], weight[present]
            docs.append(rows)
            gains.append(idf * weight)
        if len(docs) == 1:
            return docs[0], gains[0]
        if not docs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return np.concatenate(docs), np.concatenate(gains)

    @property
    def nbytes(self) -> int:
        arrays = sum(s.nbytes for s in self._segments) + self._lengths.nbytes + self._document_frequency.nbytes
        return arrays + (self._position.nbytes if self._position is not None else 0) + 120 * len(self._terms)

    def _number(self, term: str) -> int:
        number = self._numbers.get(term)
        if number is None:
            number = self._numbers[term] = len(self._terms)
            self._terms.append(term)
        return number

    def _merge_segments(self) -> None:
        """Keep few segments: the small ones are joined once there are too many, and joined with the large one
        once they hold a good share of its postings (so a posting is copied a bounded number of times)."""
        if len(self._segments) <= _SEGMENTS:
            return
        small = _Segment.joined([s.parts() for s in self._segments[1:]])
        if small.nbytes * _SMALL_SHARE >= self._segments[0].nbytes:
            self._segments = [_Segment.joined([self._segments[0].parts(), small.parts()])]
        else:
            self._segments = [self._segments[0], small]


_SEGMENTS = 8  # segments before the small ones are joined
_SMALL_SHARE = 4  # the small ones join the large one once they hold a quarter of its size


class _Segment:
    """Postings sorted by term: for the i-th term present, `docs` and `frequencies` from starts[i] to starts[i+1]."""

    def __init__(self, terms: np.ndarray, starts: np.ndarray, docs: np.ndarray, frequencies: np.ndarray) -> None:
        self.terms, self.starts, self.docs, self.frequencies = terms, starts, docs, frequencies

    @classmethod
    def of(cls, terms: np.ndarray, docs: np.ndarray) -> _Segment:
        """From one (term, row) pair per token: each pair once, with its count."""
        span = int(docs.max()) + 1 if len(docs) else 1
        pairs, frequencies = np.unique(terms * span + docs, return_counts=True)
        term_of, doc_of = np.divmod(pairs, span)
        return cls._sorted(term_of, doc_of, frequencies)

    @classmethod
    def joined(cls, parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> _Segment:
        """One segment from (term, row, frequency) postings of segments (each row in one of them only)."""
        terms, docs, frequencies = (np.concatenate(column) for column in zip(*parts))
        order = np.argsort(terms, kind="stable")  # each part is sorted already: a merge of runs
        return cls._sorted(terms[order], docs[order], frequencies[order])

    @classmethod
    def _sorted(cls, terms: np.ndarray, docs: np.ndarray, frequencies: np.ndarray) -> _Segment:
        present, first = np.unique(terms, return_index=True)
        starts = np.append(first, len(terms)).astype(np.int64)
        return cls(present.astype(np.int64), starts, docs.astype(np.int32), frequencies.astype(np.int32))

    def parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.repeat(self.terms, np.diff(self.starts)), self.docs, self.frequencies

    def find(self, term: int) -> tuple[int, int]:
        at = int(np.searchsorted(self.terms, term))
        if at == len(self.terms) or self.terms[at] != term:
            return 0, 0
        return int(self.starts[at]), int(self.starts[at + 1])

    @property
    def nbytes(self) -> int:
        return self.terms.nbytes + self.starts.nbytes + self.docs.nbytes + self.frequencies.nbytes


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array` with room for `size` items (zeros beyond its own), grown by half again so growing is rare."""
    if len(array) >= size:
        return array
    bigger = np.zeros(max(size, len(array) * 3 // 2), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger
