"""Helpers the tests share: paths, trees on disk, fake-task runs, output readers, the Qdrant
fault stub, tiny models. Test files import from here, never from each other."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from gpucli.core.config import RunConfig
from tests.fake_task import FAKE

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"
DATA = Path(__file__).resolve().parent / "data"


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create files (str as UTF-8, bytes as is) under root; returns root."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def run_fake(paths, out: Path, options: dict | None = None, **kw):
    kw.setdefault("devices", "cpu")
    config = RunConfig(task=FAKE, paths=tuple(str(p) for p in paths), out=str(out), progress="off",
                       task_options=options or {}, **kw)
    from gpucli.engines.local.pipeline import run

    return run(config)


def read_rows(out: Path) -> list[dict]:
    return ds.dataset(str(out), format="parquet").to_table().to_pylist()


def run_with(engine: str, task: str, paths, out: Path, options: dict | None = None, **kw):
    from gpucli.engines import run_engine

    config = RunConfig(task=task, paths=tuple(str(p) for p in paths), out=str(out), progress="off", devices="cpu",
                       engine=engine, task_options=options or {}, **kw)
    return run_engine(config)


def expected_rows(root: Path) -> Counter:
    """(path, chunk, text) of every non-empty line of every .txt under root, once."""
    want: Counter = Counter()
    for path in root.rglob("*.txt"):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        want.update((str(path.relative_to(root)), i, line) for i, line in enumerate(lines))
    return want


def jsonl_rows(out: Path) -> Counter:
    """Parses line by line (a torn line fails here)."""
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return Counter((r["path"], r["chunk"], r["text"]) for r in rows)


def parquet_rows(out: Path) -> Counter:
    return Counter((r["path"], r["chunk"], r["text"]) for r in read_rows(out))


def unlistable(monkeypatch, directory: Path) -> None:
    """os.scandir fails for this one directory, as for permission denied or a stale mount."""
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if os.path.abspath(path) == str(directory):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)


def points(storage: Path, collection: str) -> list:
    """Every point of an embedded collection (Qdrant Edge): records with a string `id`, the
    `payload`, and the `vector` (the unnamed one alone as a list, else {name: vector})."""
    from types import SimpleNamespace

    import qdrant_edge as edge

    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import EdgeClient

    client = EdgeClient(parse_target(f"qdrant:{storage}/{collection}"))
    try:
        shard, found, offset = client.shard(), [], None
        while True:
            batch, offset = shard.scroll(edge.ScrollRequest(offset=offset, limit=256, with_payload=True,
                                                            with_vector=True))
            found.extend(SimpleNamespace(id=str(r.id), payload=r.payload, vector=_unnamed(r.vector)) for r in batch)
            if offset is None:
                return found
    finally:
        client.close()


def storage_released(storage: Path, within_s: float = 30.0) -> bool:
    """Whether the embedded storage's lock is free, waiting up to `within_s` for it: a run killed
    without closing leaves its Qdrant Edge process a moment to see that and end (it shares the
    lock until then)."""
    import fcntl
    import time

    deadline = time.monotonic() + within_s
    while True:
        with open(storage / ".lock", "r+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
        time.sleep(0.05)


def _unnamed(vector):
    return vector[""] if isinstance(vector, dict) and set(vector) == {""} else vector


class FaultStub:
    """Answers the few REST calls the sink makes with minimal valid bodies, after failing the
    first `fail_first` requests that match `fail_on` with `fail_status` (or hanging `hang_s`).
    Not a Qdrant stand-in: it records requests so tests can count tries and read headers."""

    def __init__(self, fail_on: str = r".*", fail_first: int = 0, fail_status: int = 503,
                 fail_message: str = "stub: overloaded", hang_s: float = 0.0) -> None:
        self.fail_on, self.fail_first, self.fail_status = re.compile(fail_on), fail_first, fail_status
        self.fail_message, self.hang_s = fail_message, hang_s
        self.requests: list[dict] = []
        self._failed = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                stub._handle(self)

            do_PUT = do_POST = do_DELETE = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, pattern: str) -> list[dict]:
        return [r for r in self.requests if re.search(pattern, f"{r['method']} {r['path']}")]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        line = f"{h.command} {h.path.split('?')[0]}"
        with self._lock:
            self.requests.append({"method": h.command, "path": h.path.split("?")[0], "t": time.monotonic(),
                                  "headers": dict(h.headers), "body": json.loads(body) if body else None})
            failing = self.fail_on.search(line) and self._failed < self.fail_first
            if failing:
                self._failed += 1
        if failing and self.hang_s:
            time.sleep(self.hang_s)
        elif failing:
            return self._send(h, self.fail_status, {"status": {"error": self.fail_message}, "time": 0})
        self._send(h, 200, {"result": self._result(h.command, h.path.split("?")[0]), "status": "ok", "time": 0.001})

    @staticmethod
    def _result(method: str, path: str):
        if path.endswith("/exists"):
            return {"exists": False}
        if method == "PUT" and re.fullmatch(r"/collections/[^/]+", path):
            return True
        if method == "POST" and path.endswith("/points"):
            return []  # retrieve: no stale chunks
        return {"operation_id": 1, "status": "completed"}  # index, upsert, delete

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)


def qdrant_schema():
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("chunk", pa.int32()), ("text", pa.string()),
                      ("embedding", pa.list_(pa.float32(), 4))])


def qdrant_table(keys):
    import numpy as np
    import pyarrow as pa

    vectors = np.ones((len(keys), 4), dtype=np.float32)
    return pa.Table.from_arrays([pa.array([k[0] for k in keys]), pa.array([k[1] for k in keys], pa.int32()),
                                 pa.array(["t"] * len(keys)),
                                 pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4)], schema=qdrant_schema())


def save_tiny_vit(path: Path) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    names = {0: "tabby, tabby cat", 1: "espresso", 2: "goldfish, Carassius auratus", 3: "rocket"}
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=4, id2label=names, label2id={v: k for k, v in names.items()},
    )  # fmt: skip
    transformers.ViTForImageClassification(config).save_pretrained(path)
    processor = {
        "image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": 32, "width": 32},
        "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    }  # fmt: skip
    (path / "preprocessor_config.json").write_text(json.dumps(processor))
    return path


# --- the accounts without processes (tests/unit) --------------------------------------------------
@dataclass
class FakeSink:
    """Keeps what it is given; says where it put it."""

    tables: list = field(default_factory=list)
    calls: list = field(default_factory=list)

    def write(self, table) -> str:
        self.tables.append(table)
        self.calls.append("sink.write")
        return f"part-{len(self.tables):05d}"


@dataclass
class FakeOutput:
    """What the accounts ask of the output side: the sink, the ledger's marks, the failures log."""

    sink: FakeSink = field(default_factory=FakeSink)
    failures: list = field(default_factory=list)
    committed: list = field(default_factory=list)
    unchanged_sources: list = field(default_factory=list)
    known_failures: set = field(default_factory=set)

    def failed(self, failures: list[Any]) -> int:
        self.failures.extend(failures)
        return sum(failure.path in self.known_failures for failure in failures)

    def unchanged(self, sources: list[Any]) -> None:
        self.unchanged_sources.extend(sources)

    def commit(self, sources: list[Any], rows: list[int], location: str | None) -> None:
        self.sink.calls.append("ledger.commit")
        self.committed.append(([s.path for s in sources], rows, location))

    def commit_part(self, table: Any, sources: list[Any], rows: list[int]) -> None:
        self.commit(sources, rows, self.sink.write(table))


def make_accounts() -> tuple[Any, FakeOutput]:
    """Accounts over the fake task and a fake output (gpucli/output/accounts.py)."""
    from gpucli.core.progress import Counts
    from gpucli.core.summary import RunSummary
    from gpucli.output.accounts import Accounts
    from gpucli.output.settings import output_schema
    from gpucli.tasks import TaskSpec
    from tests.fake_task import FakeTask

    task = FakeTask(TaskSpec("fake", "fake-model"))
    output = FakeOutput()
    return Accounts(task, output, RunSummary(task="fake", model="m"), Counts(), output_schema(task)), output


def sources(n: int) -> list[Any]:
    from gpucli.core.records import Source

    return [Source(i, f"f{i}.txt", f"/in/f{i}.txt", size=10 + i, mtime_ns=1, digest=f"d{i}") for i in range(n)]


def block(pairs: list[tuple[int, int]]) -> Any:
    """Items for (source id, item index) pairs, each a line "s<id> i<index>"."""
    from gpucli.core.records import Item, Items

    return Items.from_items([Item(sid, index, f"s{sid} i{index}", 2, {"chunk": index, "text": f"s{sid} i{index}"})
                             for sid, index in pairs])


def outputs(items: Any) -> list[dict]:
    return [{"words": 2, "embedding": [float(sid), 0.0, 0.0, 0.0]} for sid in items.source_ids.tolist()]


def sigkill_after_parts(script: str, out: Path, parts: int = 3, timeout_s: float = 60) -> None:
    """Run `script` (python -c) in its own process group, and SIGKILL the whole group once `out`
    holds `parts` complete parts (or after `timeout_s`): a run killed mid-way, for rerun tests."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(list(out.glob("part-*.parquet"))) < parts:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def refusal(stdout: str, exit_code: int) -> dict:
    """What `--json` prints when a command is refused before its run (a usage error, a root that
    cannot be listed): exactly one JSON object, with its exit code, its error and no work counted."""
    import json

    (line,) = stdout.splitlines()
    ended = json.loads(line)
    assert ended["exit_code"] == exit_code and ended["error"] and ended["succeeded"] == ended["rows"] == 0, ended
    return ended
