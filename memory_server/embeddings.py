"""Sentence vectors from a model2vec static model, and a disk cache so unchanged text is never embedded twice.

The bundled model (distilled from all-MiniLM-L6-v2, see `model/NOTICE`) loads offline in a fraction of a second;
any other model2vec model can be named by folder or hub id, and when it cannot be loaded the bundled one is used
and the reason is reported with every search.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from memory_server.files import lock_path_for, locked, remove_stale_temp_files, write_atomically
from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

logger = logging.getLogger(__name__)

BUNDLED_MODEL = Path(__file__).resolve().parent / "model"
BUNDLED_NAME = "bundled:all-MiniLM-L6-v2-static-256"
OFF = "none"
CACHE_LOCK_TIMEOUT = 5.0  # seconds; a save that cannot have the lock is skipped, the vectors are saved next time
PROGRESS_STEP = 4096  # texts encoded between two progress reports


class Embedder:
    """Encodes text to L2-normalised float32 vectors, remembering every vector it made (and those on disk)."""

    def __init__(self, model: object, name: str, cache_dir: Path | None = None) -> None:
        self._model = model
        self.name = name
        self.dim = int(model.dim)  # type: ignore[attr-defined]
        self._memo: dict[bytes, np.ndarray] = {}
        self._vocabulary: frozenset[str] | None = None
        self._lock = threading.Lock()
        self._cache_file = cache_dir / f"{_fingerprint(model, name)}.npz" if cache_dir else None
        self._unsaved = 0
        self._save_timer: threading.Timer | None = None
        # Told (done, total) as a long encode goes: the command line draws a progress bar with it.
        self.on_progress: Callable[[int, int], None] | None = None
        self._load_cache()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Vectors for `texts`, one row each; only texts never seen before go through the model."""
        keys = [_key(text) for text in texts]
        with self._lock:
            missing = {k: t for k, t in zip(keys, texts) if k not in self._memo}
            if missing:
                vectors = self._encode_reporting(list(missing.values()))
                self._memo.update(zip(missing.keys(), vectors))
                self._unsaved += len(missing)
            if not keys:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._memo[k] for k in keys]).astype(np.float32, copy=False)

    def encode_query(self, text: str) -> np.ndarray:
        return self._encode_new([text])[0]

    def knows(self, word: str) -> bool:
        """Whether `word` (lower-case) is a whole word of the model's vocabulary, not pieced together from
        fragments as "asdf" or "qwerty" are: the model's vector for a text of such fragments means nothing."""
        if self._vocabulary is None:
            tokenizer = getattr(self._model, "tokenizer", None)
            vocabulary = tokenizer.get_vocab() if tokenizer is not None else None
            self._vocabulary = frozenset(w.lower() for w in vocabulary) if vocabulary else frozenset()
        return not self._vocabulary or word in self._vocabulary

    def save_soon(self, delay: float = 5.0) -> None:
        """Save new vectors a little later, so a burst of changes costs one write of the cache."""
        with self._lock:
            if self._cache_file is None or not self._unsaved or self._save_timer is not None:
                return
            self._save_timer = threading.Timer(delay, self.save)
            self._save_timer.daemon = True
            self._save_timer.start()

    def save(self) -> None:
        """Write the vectors made since the last save to the cache file (atomically; other processes may share it)."""
        with self._lock:
            if self._save_timer is not None:
                self._save_timer.cancel()
                self._save_timer = None
            if self._cache_file is None or not self._unsaved:
                return
            keys = np.frombuffer(b"".join(self._memo.keys()), dtype="S16")
            vectors = np.stack(list(self._memo.values())).astype(np.float16)  # half the disk; cosines move < 1e-3
            self._unsaved = 0
        buffer = io.BytesIO()
        np.savez(buffer, keys=keys, vectors=vectors)
        try:
            self._cache_file.parent.mkdir(parents=True, exist_ok=True)
            # Every process sharing the cache saves under this lock, so a temporary file found while holding it
            # was left by a saver that was killed: it is swept then.
            lock = filelock.FileLock(lock_path_for(self._cache_file), thread_local=False)
            with locked(lock, CACHE_LOCK_TIMEOUT):
                remove_stale_temp_files(self._cache_file)
                write_atomically(self._cache_file, buffer.getvalue())
        except OSError as problem:  # a full disk, a busy lock...: the cache is only a cache
            logger.warning("Could not save the vector cache %s: %s", self._cache_file, problem)
            with self._lock:
                self._unsaved += 1  # try again at the next save

    def _encode_reporting(self, texts: list[str]) -> np.ndarray:
        if self.on_progress is None or len(texts) <= PROGRESS_STEP:
            return self._encode_new(texts)
        parts = []
        for start in range(0, len(texts), PROGRESS_STEP):
            parts.append(self._encode_new(texts[start : start + PROGRESS_STEP]))
            self.on_progress(start + len(parts[-1]), len(texts))
        return np.concatenate(parts)

    def _encode_new(self, texts: list[str]) -> np.ndarray:
        # The tokenizer takes only valid Unicode: a lone surrogate (which JSON allows) becomes "?".
        texts = [t if t.isascii() else t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        vectors = self._model.encode(texts, use_multiprocessing=False)  # type: ignore[attr-defined]
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)

    def _load_cache(self) -> None:
        if self._cache_file is None or not self._cache_file.exists():
            return
        try:
            with np.load(self._cache_file, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
            if keys.dtype != np.dtype("S16") or vectors.shape != (len(keys), self.dim):
                raise ValueError(f"shape {vectors.shape} does not fit {len(keys)} keys of dimension {self.dim}")
        except Exception as problem:  # any damage means "no cache": it is rebuilt as texts are embedded again
            logger.warning(
                "Ignoring the unreadable vector cache %s (%s); it will be rebuilt.", self._cache_file, problem
            )
            self._unsaved = 1
            return
        vectors = vectors.astype(np.float32)
        self._memo.update(zip((bytes(k).ljust(16, b"\0") for k in keys), vectors))


@dataclass
class EmbedderSlot:
    """The embedder of a server process, loaded in the background so the MCP handshake never waits for it."""

    requested: str | None = None  # None: the bundled model; "none": semantic search off
    cache_dir: Path | None = None
    embedder: Embedder | None = None
    note: str | None = None  # why the requested model is not the one in use
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
        """At shutdown: wait for the loader (if it started), then save what the cache does not hold yet."""
        if self._thread is None:
            return
        self._ready.wait(timeout)
        if self.embedder is not None:
            self.embedder.save()

    def _load(self) -> None:
        try:
            self.embedder, self.note = load_embedder(self.requested, self.cache_dir)
        finally:
            self._ready.set()


def load_embedder(requested: str | None, cache_dir: Path | None) -> tuple[Embedder | None, str | None]:
    """The model to use and, when it is not the one requested, a note saying why."""
    if requested is not None and requested.strip().lower() == OFF:
        return None, "semantic search is off (--embedding-model none); results are ranked by keywords only"
    if requested:
        try:
            return Embedder(_load_model(requested), requested, cache_dir), None
        except Exception as problem:  # offline, missing folder, not a model2vec model...
            note = f"could not load the embedding model {requested!r} ({_short(problem)}); using the bundled model"
            logger.warning(note)
    else:
        note = None
    try:
        return Embedder(_load_model(str(BUNDLED_MODEL)), BUNDLED_NAME, cache_dir), note
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
    """Names the cache file: the model's name plus a hash of its weights, so a changed model gets a new cache."""
    weights = np.asarray(model.embedding)  # type: ignore[attr-defined]
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass"))
    digest.update(str(weights.shape).encode())
    digest.update(np.ascontiguousarray(weights[:: max(1, len(weights) // 64)]).tobytes())
    return digest.hexdigest()[:20]


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _short(problem: BaseException) -> str:
    text = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    return text[:200]
