"""Programs that change a memory file without our lock, as git, editors and sync clients do. Run as scripts, in
their own processes, by the tests (`python tests/outside_writers.py KIND PATH ...`).

Each one saves the file `--saves` times. A save reads the file, adds one entity line of its own (`TAG-k`) and
writes everything back the way its kind of program does; it never looks at our lock. Each line it saves is printed
(flushed) once the save is complete, then `done`, so a test knows which lines the outside program wrote and when its
last save ended.

- rename: like git checkout/pull and most editors: a temporary file in the same folder, renamed over the file.
  Half of its saves end without a final newline, as the official server writes its file.
- inplace: like Node's fs.writeFile from a slow editor: the file is truncated, then written in small chunks with
  pauses between them.
- sync: like a sync client (Dropbox, Syncthing): the new content is written in a cache folder elsewhere and renamed
  over the real file, which the memory path reaches through a symbolic link.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path


def line_of(tag: str, k: int) -> str:
    return f'{{"type":"entity","name":"{tag}-{k}","entityType":"outside","observations":["saved by {tag} #{k}"]}}'


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def with_line(content: bytes, line: str, final_newline: bool) -> bytes:
    if content and not content.endswith(b"\n"):
        content += b"\n"
    return content + line.encode() + (b"\n" if final_newline else b"")


def save_by_rename(path: Path, content: bytes, folder: Path) -> None:
    temp = folder / f".{path.name}.outside-{os.getpid()}-{random.randrange(10**9)}"
    with open(temp, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def save_in_place(path: Path, content: bytes, rng: random.Random) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(content)
        while view:
            size = rng.randint(64, 700)
            view = view[os.write(fd, view[:size]) :]
            time.sleep(rng.uniform(0.002, 0.015))
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["rename", "inplace", "sync"])
    parser.add_argument("path", type=Path)
    parser.add_argument("--saves", type=int, default=10)
    parser.add_argument("--pause", type=float, nargs=2, default=(0.05, 0.2), help="seconds between saves")
    parser.add_argument("--tag", default="outside")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    path = options.path
    real = Path(os.path.realpath(path))
    cache = real.parent.parent / ".sync-cache"
    cache.mkdir(exist_ok=True)
    for k in range(options.saves):
        time.sleep(rng.uniform(*options.pause))
        line = line_of(options.tag, k)
        if options.kind == "rename":
            save_by_rename(path, with_line(read(path), line, rng.random() < 0.5), path.parent)
        elif options.kind == "inplace":
            save_in_place(path, with_line(read(path), line, True), rng)
        else:
            save_by_rename(real, with_line(read(real), line, True), cache)
        print(line, flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
