"""A tree that changes while `--watch` keeps an output in step with it (tests/integration/test_watch.py).

`Churn` creates, rewrites, touches, deletes and renames small `.txt` files under a root, saves
some the way editors do (a hidden temporary renamed over the file), moves whole directories, and
writes some slowly, in pieces cut in the middle of a line, with pauses much shorter than the
watch's quiet interval. Each line of each version of each file is unique (`f12 v3 line 1 ...`),
and every line ever written is remembered (`lines`), so that what the model was given (the fake
task's batch log) says whether any read was of a half-written file: a cut line that no version
holds, or a version's first line read more often than its last (`half_written_reads`).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


class Churn:
    def __init__(self, root: Path, seed: int = 7, piece_pause_s: float = 0.03) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.piece_pause_s = piece_pause_s
        self.files: list[Path] = []  # the files there now (the slow ones once written whole)
        self.lines: set[str] = set()  # every line any version of any file held
        self.versions: dict[str, int] = {}  # a version's tag ("f12 v3") -> its number of lines
        self.ops: Counter = Counter()
        self._next = 0
        self._slow: list[threading.Thread] = []
        self._writing: set[Path] = set()  # slow writes under way: left alone by the other operations
        self._lock = threading.Lock()

    # --- contents -------------------------------------------------------------------------
    def _content(self, number: int) -> str:
        version = self.versions.get(f"#{number}", 0) + 1
        self.versions[f"#{number}"] = version
        tag = f"f{number} v{version}"
        count = self.rng.randint(1, 4)
        lines = [f"{tag} line {j} " + " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 5)))
                 for j in range(count)]
        with self._lock:
            self.lines.update(lines)
            self.versions[tag] = count
        return "".join(line + "\n" for line in lines)

    def _new_path(self) -> tuple[int, Path]:
        self._next += 1
        directory = self.root / f"d{self.rng.randint(0, 7)}"
        directory.mkdir(parents=True, exist_ok=True)
        return self._next, directory / f"f{self._next}.txt"

    @staticmethod
    def _number(path: Path) -> int:
        return int(path.stem[1:])

    # --- operations -----------------------------------------------------------------------
    def seed_tree(self, count: int) -> None:
        for _ in range(count):
            self.create()

    def create(self) -> None:
        number, path = self._new_path()
        path.write_text(self._content(number))
        self.files.append(path)
        self.ops["create"] += 1

    def _pick(self) -> Path | None:
        for _ in range(5):
            if not self.files:
                return None
            path = self.rng.choice(self.files)
            if path not in self._writing:
                return path
        return None

    def rewrite(self) -> None:
        if (path := self._pick()) is not None:
            path.write_text(self._content(self._number(path)))
            self.ops["rewrite"] += 1

    def save_by_rename(self) -> None:
        """An editor's save: a hidden temporary beside the file, renamed over it."""
        if (path := self._pick()) is not None:
            temporary = path.with_name(f".{path.name}.swp")
            temporary.write_text(self._content(self._number(path)))
            os.replace(temporary, path)
            self.ops["save_by_rename"] += 1

    def touch(self) -> None:
        if (path := self._pick()) is not None:
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
            self.ops["touch"] += 1

    def delete(self) -> None:
        if (path := self._pick()) is not None:
            path.unlink()
            self.files.remove(path)
            self.ops["delete"] += 1

    def rename(self) -> None:
        """A move to another directory under a new number: the same content, a new path."""
        if (path := self._pick()) is not None:
            number, target = self._new_path()
            os.replace(path, target)
            self.files[self.files.index(path)] = target
            self.ops["rename"] += 1

    def move_directory(self) -> None:
        """A whole directory renamed (one event for the directory, none for its files)."""
        directory = self.root / f"d{self.rng.randint(0, 7)}"
        if not directory.is_dir() or any(p.parent == directory for p in self._writing):
            return
        target = self.root / f"moved{self._next}"
        self._next += 1
        os.replace(directory, target)
        self.files = [target / p.name if p.parent == directory else p for p in self.files]
        self.ops["move_directory"] += 1

    def write_slowly(self) -> None:
        """A new file written in 3-6 pieces cut mid-line, in a thread of its own."""
        number, path = self._new_path()
        content = self._content(number)
        cuts = sorted(self.rng.sample(range(1, len(content)), min(len(content) - 1, self.rng.randint(2, 5))))
        pieces = [content[a:b] for a, b in zip([0, *cuts], [*cuts, len(content)])]
        self._writing.add(path)
        thread = threading.Thread(target=self._pieces, args=(path, pieces), daemon=True)
        self._slow.append(thread)
        thread.start()
        self.ops["write_slowly"] += 1

    def _pieces(self, path: Path, pieces: list[str]) -> None:
        with open(path, "w") as f:
            for piece in pieces:
                f.write(piece)
                f.flush()
                time.sleep(self.piece_pause_s)
        with self._lock:
            self.files.append(path)
            self._writing.discard(path)

    STEPS = (("create", 30), ("rewrite", 20), ("save_by_rename", 8), ("touch", 8), ("delete", 12),
             ("rename", 12), ("write_slowly", 4), ("move_directory", 0.3))

    def run(self, operations: int, seconds: float, stop: threading.Event | None = None) -> None:
        """`operations` random steps spread over about `seconds` (sooner when the box is slow to
        keep up: the steps are never delayed to wait for the watch)."""
        names, weights = zip(*self.STEPS)
        start = time.monotonic()
        for i in range(operations):
            if stop is not None and stop.is_set():
                break
            getattr(self, self.rng.choices(names, weights)[0])()
            ahead = start + seconds * (i + 1) / operations - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        self.wait_for_slow_writes()

    def wait_for_slow_writes(self) -> None:
        for thread in self._slow:
            thread.join(30)
        self._slow.clear()


def half_written_reads(batch_log: Path, churn: Churn) -> list[str]:
    """What the model was given that no whole version of a file holds: a line cut short (not a
    line any version held), or a version read with fewer lines than it has (its first line given
    more often than its last). Empty when every read was of a whole file."""
    given: Counter = Counter()
    for line in batch_log.read_text().splitlines():
        given.update(json.loads(line)["texts"])
    problems = [f"cut line: {text!r}" for text in given if text not in churn.lines]
    for tag, count in churn.versions.items():
        if tag.startswith("#"):
            continue
        first = sum(n for text, n in given.items() if text.startswith(f"{tag} line 0 "))
        last = sum(n for text, n in given.items() if text.startswith(f"{tag} line {count - 1} "))
        if first != last:
            problems.append(f"{tag}: first line read {first} time(s), last line {last}")
    return problems
