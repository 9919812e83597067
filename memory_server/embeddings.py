"""Sentence vectors from a model2vec static model (the vectors of a memory's documents are cached on disk by
vector_cache.py, so unchanged text is never embedded twice).

The bundled model (distilled from all-MiniLM-L6-v2, see `model/NOTICE`) loads offline in a fraction of a second;
any other model2vec model can be named by folder or hub id, and when it cannot be loaded the bundled one is used
and the reason is reported with every search.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from memory_server.lazy import lazy_module
from memory_server.lexical import stem

if TYPE_CHECKING:
    import numpy as np

    from memory_server.rerank import RerankerSlot
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

logger = logging.getLogger(__name__)

BUNDLED_MODEL = Path(__file__).resolve().parent / "model"
BUNDLED_NAME = "bundled:all-MiniLM-L6-v2-static-256"
OFF = "none"
BATCH = 4096  # texts encoded at a time, and between two progress reports


class Embedder:
    """Encodes text to L2-normalised float32 vectors. It keeps none: an index holds its documents' vectors, and each
    memory's vector cache (vector_cache.py) keeps them across restarts."""

    def __init__(self, model: object, name: str) -> None:
        self._model = model
        self.name = name
        self.dim = int(model.dim)  # type: ignore[attr-defined]
        self.fingerprint = _fingerprint(model, name)  # names the folder of this model's caches
        self.encoded = 0  # texts the model has encoded (queries aside)
        self._vocabulary: frozenset[str] | None = None
        self._stems: frozenset[str] | None = None  # of the vocabulary's words (see knows_form)
        self._words: _WordVectors | None | Literal[False] = None  # False: the model has no whole words
        self._related: dict[str, tuple[tuple[str, float], ...]] = {}
        self._word_vectors: dict[str, np.ndarray] = {}  # see word_vectors
        self._lock = threading.Lock()  # the tokenizer's settings change during a call: one call at a time
        # Told (done, total) as a long encode goes: the command line draws a progress bar with it.
        self.on_progress: Callable[[int, int], None] | None = None

    def encode(self, texts: list[str]) -> np.ndarray:
        """Vectors for `texts`, one row each, a batch at a time (memory stays bounded whatever their number)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), BATCH):
            out[start : start + BATCH] = self.encode_batch(texts[start : start + BATCH])
            if self.on_progress is not None and len(texts) > BATCH:
                self.on_progress(min(start + BATCH, len(texts)), len(texts))
        return out

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        """Vectors for a batch of texts. A text's vector depends on that text alone, never on the others."""
        self.encoded += len(texts)
        return self._encode_new(texts)

    def encode_query(self, text: str) -> np.ndarray:
        return self._encode_new([text])[0]

    def word_vectors(self, texts: list[str]) -> np.ndarray:
        """Vectors for short texts that come back question after question (a question's words, the roles of the
        user's relatives: memory_server.user), one row each, as `encode` gives them: each is encoded once, then
        remembered (a text's vector depends on that text alone). Each first-person question encoded them again:
        ~0.8 ms."""
        memo = self._word_vectors
        found = {text: memo.get(text) for text in texts}
        missing = [text for text, vector in found.items() if vector is None]
        if missing:
            found.update(zip(missing, self._encode_new(missing)))
            with self._lock:
                if len(memo) + len(missing) > _RELATED_MEMO:
                    memo.clear()
                memo.update((text, found[text]) for text in missing)
        return np.array([found[text] for text in texts], dtype=np.float32).reshape(len(texts), self.dim)

    def knows(self, word: str) -> bool:
        """Whether `word` (lower-case) is a whole word of the model's vocabulary, not pieced together from
        fragments as "asdf" or "qwerty" are: the model's vector for a text of such fragments means nothing."""
        if self._vocabulary is None:
            tokenizer = getattr(self._model, "tokenizer", None)
            vocabulary = tokenizer.get_vocab() if tokenizer is not None else None
            self._vocabulary = frozenset(w.lower() for w in vocabulary) if vocabulary else frozenset()
        return not self._vocabulary or word in self._vocabulary

    def knows_form(self, word: str) -> bool:
        """Whether `word` is a whole word of the vocabulary or a form of one ("hobbies", pieced together from "ho"
        and "##bbies", is a form of "hobby": their Snowball stems are one): a word with a meaning, which a
        transformer reading the whole sentence understands, though the static vector of its fragments is noise."""
        if self.knows(word):
            return True
        if self._stems is None:  # made at the first word that is not whole: ~30,000 words stemmed once
            self._stems = frozenset(stem(w) for w in self._vocabulary or () if w.isalpha())
        return stem(word) in self._stems

    def related_words(self, word: str, count: int = 40, floor: float = 0.3) -> tuple[tuple[str, float], ...]:
        """The whole words of the model's vocabulary nearest to `word` (lower-case), with their similarity, best first:
        at most `count`, each at least `floor`. Similarity is the cosine of the two words' token vectors once their
        common direction is removed (without that, every pair of words looks alike to a static model). Empty for a
        word the model only pieces together from fragments."""
        if word not in self._related:
            if self._words is None:
                self._words = _WordVectors.of(self._model) or False
            found = self._words.nearest(word, count, floor) if self._words else ()
            with self._lock:
                if len(self._related) >= _RELATED_MEMO:
                    self._related.clear()
                self._related[word] = found
        return self._related[word]

    def _encode_new(self, texts: list[str]) -> np.ndarray:
        # The tokenizer takes only valid Unicode: a lone surrogate (which JSON allows) becomes "?".
        texts = [t if t.isascii() else t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        with self._lock:
            vectors = self._model.encode(texts, use_multiprocessing=False)  # type: ignore[attr-defined]
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


_RELATED_MEMO = 10_000  # words whose neighbours (and texts whose vectors: word_vectors) are remembered


@dataclass(frozen=True)
class _WordVectors:
    """The model's whole-word tokens (letters only, three or more) and what finding their neighbours takes: the
    token vectors' mean (the direction every word shares) and the centred vectors projected on their main
    directions, which shortlist a word's likely neighbours in a fraction of the time a full product takes; the
    exact similarity of the centred, normalised token vectors then orders the shortlist."""

    words: tuple[str, ...]
    numbers: dict[str, int]
    tokens: np.ndarray  # row of each word in the model's embedding
    embedding: np.ndarray  # the model's own matrix (not copied)
    mean: np.ndarray
    basis: np.ndarray  # PROJECTED main directions of the centred word vectors
    projected: np.ndarray  # the normalised centred word vectors on those directions

    PROJECTED = 96  # with a shortlist of 128: 97% of the exact 40 nearest words (at 0.35 or more) are found
    SHORTLIST = 128
    CHUNK = 2048

    @classmethod
    def of(cls, model: object) -> _WordVectors | None:
        tokenizer = getattr(model, "tokenizer", None)
        vocabulary = tokenizer.get_vocab() if tokenizer is not None else {}
        embedding = np.asarray(getattr(model, "embedding", np.zeros((0, 0))))
        pairs = sorted(
            (token, number)
            for token, number in vocabulary.items()
            if len(token) > 2 and token.isalpha() and token.islower() and number < len(embedding)
        )
        if len(pairs) <= cls.SHORTLIST or embedding.ndim != 2 or embedding.shape[1] < cls.PROJECTED:
            return None
        tokens = np.asarray([number for _, number in pairs])
        mean = sum(  # a few thousand words at a time (see below)
            embedding[tokens[start : start + cls.CHUNK]].sum(axis=0, dtype=np.float64)
            for start in range(0, len(tokens), cls.CHUNK)
        )
        mean = (mean / len(tokens)).astype(np.float32)

        def centred(rows: np.ndarray) -> np.ndarray:
            return _normalised(embedding[rows].astype(np.float32) - mean)

        # The main directions: the right singular vectors of a sample, found as the eigenvectors of its 256 x 256
        # Gram matrix (an SVD of the sample itself leaves some 20 MB of workspace with the allocator for good).
        sample = centred(tokens[:: max(1, len(tokens) // 4096)]).astype(np.float64)
        values, vectors = np.linalg.eigh(sample.T @ sample)
        basis = np.ascontiguousarray(vectors[:, np.argsort(-values)[: cls.PROJECTED]].T, dtype=np.float32)
        # A few thousand words at a time: the float copies of every word vector would hold some 60 MB at once, which
        # the allocator keeps (a server on a small memory would stay that much larger for good).
        projected = np.empty((len(tokens), cls.PROJECTED), dtype=np.float32)
        for start in range(0, len(tokens), cls.CHUNK):
            projected[start : start + cls.CHUNK] = centred(tokens[start : start + cls.CHUNK]) @ basis.T
        words = tuple(token for token, _ in pairs)
        return cls(words, {w: n for n, w in enumerate(words)}, tokens, embedding, mean, basis, projected)

    def nearest(self, word: str, count: int, floor: float) -> tuple[tuple[str, float], ...]:
        number = self.numbers.get(word)
        if number is None:
            return ()
        vector = self._exact(np.asarray([number]))[0]
        rough = self.projected @ (self.basis @ vector)
        rough[number] = -np.inf
        shortlist = np.argpartition(-rough, self.SHORTLIST)[: self.SHORTLIST]
        similarity = self._exact(shortlist) @ vector
        order = np.argsort(-similarity)[:count]
        return tuple((self.words[shortlist[i]], float(similarity[i])) for i in order if similarity[i] >= floor)

    def _exact(self, numbers: np.ndarray) -> np.ndarray:
        return _normalised(self.embedding[self.tokens[numbers]].astype(np.float32) - self.mean)


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


@dataclass
class EmbedderSlot:
    """The embedder of a server process, loaded in the background so the MCP handshake never waits for it."""

    requested: str | None = None  # None: the bundled model; "none": semantic search off
    cache_dir: Path | None = None  # where the memories' vector caches live (None: no cache)
    embedder: Embedder | None = None
    note: str | None = None  # why the requested model is not the one in use
    reranker: RerankerSlot | None = None  # a transformer's second reading of the best candidates (rerank.py)
    _ready: threading.Event = field(default_factory=threading.Event)
    _starting: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Begin loading in a background thread (once; later calls do nothing)."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="embedding-model", daemon=True)
                self._thread.start()

    def get(self, wait: float = 30.0) -> tuple[Embedder | None, str | None]:
        """The embedder once loaded (None when semantic search is off or no model could be loaded), and a note
        saying why it is not the model asked for."""
        self.start()
        if not self._ready.wait(wait):
            return None, "the embedding model is still loading, so this search ranked by keywords only"
        return self.embedder, self.note

    def close(self, timeout: float = 10.0) -> None:
        """At shutdown: wait for the loader, if it started, so no thread is left loading while Python exits."""
        if self._thread is not None:
            self._ready.wait(timeout)

    def _load(self) -> None:
        try:
            self.embedder, self.note = load_embedder(self.requested)
        finally:
            self._ready.set()


def load_embedder(requested: str | None) -> tuple[Embedder | None, str | None]:
    """The model to use and, when it is not the one requested, a note saying why."""
    if requested is not None and requested.strip().lower() == OFF:
        return None, "semantic search is off (--embedding-model none); results are ranked by keywords only"
    if requested:
        try:
            return Embedder(_load_model(requested), requested), None
        except Exception as problem:  # offline, missing folder, not a model2vec model...
            note = f"could not load the embedding model {requested!r} ({_short(problem)}); using the bundled model"
            logger.warning(note)
    else:
        note = None
    try:
        return Embedder(_load_model(str(BUNDLED_MODEL)), BUNDLED_NAME), note
    except Exception as problem:
        message = f"could not load the bundled embedding model ({_short(problem)}); ranking by keywords only"
        logger.error(message)
        return None, message


def _load_model(name: str) -> object:
    from model2vec import StaticModel  # imported here: it takes a moment, and only the loader thread needs it

    path = Path(name).expanduser()
    if path.exists() or path.is_absolute() or name.startswith((".", "~")):
        if not path.is_dir():
            raise FileNotFoundError(f"no model folder at {path}")
        return StaticModel.from_pretrained(path)
    return StaticModel.from_pretrained(name)  # a hub id such as minishlab/potion-base-8M


def _fingerprint(model: object, name: str) -> str:
    """Names the folder of the model's caches: its name plus a hash of its weights, so a changed model gets new
    caches."""
    weights = np.asarray(model.embedding)  # type: ignore[attr-defined]
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass"))
    digest.update(str(weights.shape).encode())
    digest.update(np.ascontiguousarray(weights[:: max(1, len(weights) // 64)]).tobytes())
    return digest.hexdigest()[:20]


def _short(problem: BaseException) -> str:
    text = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    return text[:200]
