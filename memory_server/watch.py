"""Noticing when another process or an editor changes a file we use.

We watch folders, not files: an atomic replace (ours, upstream's, an editor's) swaps the file's inode, which a
watch on the file itself would lose. Only the folder's own entries are watched (never recursively: a project
folder can be huge). Our own writes also show up here; the store tells them apart by the file's stamp.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import watchfiles

logger = logging.getLogger(__name__)

OnChange = Callable[[set[Path]], Awaitable[None]]


class FolderWatcher:
    def __init__(self, on_change: OnChange, debounce_ms: int = 100) -> None:
        self._on_change = on_change
        self._debounce_ms = debounce_ms
        self._folders: set[Path] = set()
        self._restart = anyio.Event()
        self._stopped = False
        self.finished = anyio.Event()

    def watch(self, folder: Path) -> None:
        """Also watch `folder` (from the next moment on). Safe to call for a folder already watched."""
        folder = Path(folder)
        if folder not in self._folders:
            self._folders.add(folder)
            self._restart.set()

    def stop(self) -> None:
        """End `run` promptly: watchfiles sees the stop event within one step."""
        self._stopped = True
        self._restart.set()

    async def run(self) -> None:
        try:
            await self._watch_until_stopped()
        finally:
            self.finished.set()

    async def _watch_until_stopped(self) -> None:
        while not self._stopped:
            self._restart = anyio.Event()
            folders = sorted(f for f in self._folders if f.is_dir())
            if not folders:
                with anyio.move_on_after(1.0):  # a folder may be created by a first write
                    await self._restart.wait()
                continue
            try:
                async for changes in watchfiles.awatch(
                    *folders,
                    watch_filter=_memory_files,
                    recursive=False,
                    debounce=self._debounce_ms,
                    stop_event=self._restart,
                    rust_timeout=1000,
                    yield_on_timeout=True,
                ):
                    if changes:
                        await self._on_change({Path(path) for _, path in changes})
                    if any(not f.is_dir() for f in folders):
                        break  # a watched folder went away: start again with those that exist
            except Exception as problem:  # a watcher failure must never take the server down
                logger.warning("Watching %s failed (%s); retrying in a second.", folders, problem)
                await anyio.sleep(1.0)


def _memory_files(_change: watchfiles.Change, path: str) -> bool:
    """Only the files we read: memory files and the contexts registry (not our locks, temp files or logs)."""
    return path.endswith((".jsonl", "contexts.json"))
