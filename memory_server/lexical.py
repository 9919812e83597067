"""Words to search terms, and BM25 over them.

Terms are lower-cased words without stop words, reduced by the Snowball English stemmer (PyStemmer, the Snowball
project's C binding: "lives", "live" and "living" all become "live"), the same for documents and queries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import Stemmer

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


def words(text: str) -> list[str]:
    """Lower-cased words, as the terms and the first-person test see them."""
    return _WORD.findall(text.lower())


def tokenize(text: str) -> list[str]:
    """The search terms of a text: its words without stop words, stemmed."""
    return [_stem(w) for w in words(text) if w not in STOPWORDS]


def is_first_person(text: str) -> bool:
    """Whether a question is about the one asking ("where do I live", "our vet", "my boss")."""
    return not FIRST_PERSON.isdisjoint(words(text))


RELATED_WEIGHT = 0.5  # share of a term's BM25 weight that a related word earns (see related_terms)
RELATED_FLOOR = 0.4  # similarity (of centred token vectors) a word needs to stand for a word of the query
RELATED_COUNT = 3  # at most this many related words per word of the query


def related_terms(
    query: str, neighbours: Callable[[str], Sequence[tuple[str, float]]], vocabulary: Mapping[str, int]
) -> dict[str, list[tuple[str, float]]]:
    """For each word of the query, the terms of this memory that stand for it, from `neighbours` (a word's nearest
    words in the embedding model's vocabulary, best first, with their similarity): at most RELATED_COUNT of them,
    each at least RELATED_FLOOR alike, weighted RELATED_WEIGHT times their similarity. So "boss" also finds
    "supervisor" and "husband" finds "married", when the memory uses those words; see LexicalIndex.matches."""
    found: dict[str, list[tuple[str, float]]] = {}
    for word in set(words(query)) - STOPWORDS:
        own = _stem(word)
        chosen: dict[str, float] = {}
        for other, similarity in neighbours(word):
            if similarity < RELATED_FLOOR or len(chosen) >= RELATED_COUNT:
                break
            candidate = _stem(other)
            if candidate != own and candidate in vocabulary and candidate not in chosen:
                chosen[candidate] = RELATED_WEIGHT * similarity
        if chosen:
            found[own] = list(chosen.items())
    return found


@functools.lru_cache(maxsize=200_000)  # words repeat: indexing a large graph stems each distinct word once
def _stem(word: str) -> str:
    return _STEMMER.stemWord(word)


class LexicalIndex:
    """BM25 over token lists, stored as postings sorted by term, with each posting's weight precomputed."""

    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        self.size = len(documents)
        vocabulary: dict[str, int] = {}
        terms: list[int] = []
        docs: list[int] = []
        lengths = np.zeros(self.size, dtype=np.float32)
        for doc, tokens in enumerate(documents):
            lengths[doc] = len(tokens)
            for token in tokens:
                terms.append(vocabulary.setdefault(token, len(vocabulary)))
                docs.append(doc)
        self.vocabulary = vocabulary
        term_array = np.asarray(terms, dtype=np.int64)
        doc_array = np.asarray(docs, dtype=np.int64)
        # Count each (term, doc) pair once, with its frequency.
        pairs, frequency = np.unique(term_array * max(self.size, 1) + doc_array, return_counts=True)
        term_of, self.doc_of = np.divmod(pairs, max(self.size, 1))
        self.starts = np.searchsorted(term_of, np.arange(len(vocabulary) + 1))
        document_frequency = np.diff(self.starts)
        self.idf = np.log1p((self.size - document_frequency + 0.5) / (document_frequency + 0.5)).astype(np.float32)
        average = float(lengths.mean()) if self.size else 1.0
        norm = _K1 * (1 - _B + _B * lengths[self.doc_of] / max(average, 1e-9))
        self.weight = (frequency * (_K1 + 1) / (frequency + norm)).astype(np.float32)

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
        for term in set(tokenize(query)):
            index = self.vocabulary.get(term)
            others = [
                (self.vocabulary[other], weight)
                for other, weight in alternatives.get(term, ())
                if other in self.vocabulary and other != term
            ]
            if others and exact is total:
                exact = total.copy()
            if index is not None:
                best += float(self.idf[index]) * (_K1 + 1)
                start, end = self.starts[index], self.starts[index + 1]
                gain = self.idf[index] * self.weight[start:end]
                if exact is not total:
                    exact[self.doc_of[start:end]] += gain
                if not others:
                    total[self.doc_of[start:end]] += gain
                    continue
            elif not others:
                continue
            else:
                best += float(np.log1p((self.size + 0.5) / 0.5)) * (_K1 + 1)
            group = ([(index, 1.0)] if index is not None else []) + others
            spans = [(self.starts[i], self.starts[i + 1]) for i, _ in group]
            docs = np.concatenate([self.doc_of[a:b] for a, b in spans])
            gains = np.concatenate([self.idf[i] * w * self.weight[a:b] for (i, w), (a, b) in zip(group, spans)])
            order = np.lexsort((-gains, docs))  # per document, its best gain first
            docs, gains = docs[order], gains[order]
            first = np.ones(len(docs), dtype=bool)
            first[1:] = docs[1:] != docs[:-1]
            total[docs[first]] += gains[first]
        if best > 0:
            total /= best
            if exact is not total:
                exact /= best
        return total, exact
