"""Words to search terms, and BM25 over them.

Terms are lower-cased words without stop words, reduced by the Snowball English stemmer (PyStemmer, the Snowball
project's C binding: "lives", "live" and "living" all become "live"), the same for documents and queries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import Stemmer

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


def words(text: str) -> list[str]:
    """Lower-cased words, as the terms and the first-person test see them."""
    return _WORD.findall(text.lower())


def tokenize(text: str) -> list[str]:
    """The search terms of a text: its words without stop words, stemmed."""
    return [_stem(w) for w in words(text) if w not in STOPWORDS]


def is_first_person(text: str) -> bool:
    """Whether a question is about the one asking ("where do I live", "our vet", "my boss")."""
    return not FIRST_PERSON.isdisjoint(words(text))


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
        total = np.zeros(self.size, dtype=np.float32)
        best = 0.0
        for term in set(tokenize(query)):
            index = self.vocabulary.get(term)
            if index is None:
                continue
            start, end = self.starts[index], self.starts[index + 1]
            total[self.doc_of[start:end]] += self.idf[index] * self.weight[start:end]
            best += float(self.idf[index]) * (_K1 + 1)
        return total / best if best > 0 else total
