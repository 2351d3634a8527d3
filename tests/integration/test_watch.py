"""`--watch`: an output kept in step with a tree as it changes (docs/watch.md).

Each watch runs in a process of its own session (a signal or a kill -9 reaches it alone), with the
fake task (tests/fake_task.py: no model) unless a test is about the command line; its `--json`
lines are read as they come, and every wait is on a condition with a deadline that only guards a
hang. The churn tests compare the watched output with a fresh full run of the tree as it ended,
row for row: every column but `mtime` (an input touched and found unchanged keeps the rows made
from its content, and their mtime, by design: a rerun does the same).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from gpucli.core.errors import LockedError
from gpucli.output.lock import RunLock
from tests.churn import Churn, half_written_reads
from tests.helpers import ROOT, run_fake, write_tree

pytestmark = pytest.mark.slow

HANG_S = 90.0  # a guard against a hang only: nothing here asserts how fast anything is
COLUMNS = ("path", "chunk", "text", "words", "embedding", "size", "digest")
SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.core.errors import GpucliError
    from gpucli.engines import run_engine
    try:
        s = run_engine(RunConfig(task="tests.fake_task:FakeTask", paths={paths!r}, out={out!r}, devices="cpu",
                                 progress="plain", watch=True, prune=True, json=True, task_options={options!r},
                                 **{settings!r}))
    except GpucliError as exc:
        print("gpucli: error:", exc, file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    sys.exit(s.exit_code)
""")


class Watching:
    """A watch in a process of its own; its stdout's JSON lines gathered by a thread as they come."""

    def __init__(self, command: list[str], env: dict | None = None) -> None:
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, cwd=ROOT, env=env)
        self.lines: list[dict] = []
        self.stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)]
        for reader in self._readers:
            reader.start()

    @classmethod
    def fake(cls, roots: list[Path], out: Path, options: dict | None = None, env: dict | None = None,
             **settings) -> Watching:
        settings.setdefault("watch_debounce_ms", 400)
        script = SCRIPT.format(root=str(ROOT), paths=tuple(str(r) for r in roots), out=str(out), options=options or {},
                               settings=settings)
        return cls([sys.executable, "-c", script], env)

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def wait_for_paths(self, out: Path, paths: set[str]) -> None:
        """Until the output's rows are of these paths, no more and no fewer (a file written just
        before the watch started is young: its first pass holds it, a later one reads it)."""
        self.wait_for(lambda: paths_in(out) == paths, f"rows of {sorted(paths)[:5]}")

    @property
    def passes(self) -> list[dict]:
        return [line for line in self.lines if line.get("event") == "pass"]

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + HANG_S
        while not condition():
            assert self.proc.poll() is None, f"the watch ended ({self.proc.returncode}) before {what}: " \
                                             f"{''.join(self.stderr)[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} within {HANG_S:g}s: {''.join(self.stderr)[-3000:]}"
            time.sleep(0.05)

    def wait_for_pass(self, condition: Callable[[dict], bool] = lambda line: True, after: int = 0) -> dict:
        """The first pass line after the first `after` that meets `condition`."""
        self.wait_for(lambda: any(condition(p) for p in self.passes[after:]), "such a pass")
        return next(p for p in self.passes[after:] if condition(p))

    def stop(self, sig: int = signal.SIGINT) -> int:
        os.killpg(self.proc.pid, sig)
        return self.ended()

    def ended(self) -> int:
        """Its exit code, once it exited and everything it printed was read."""
        code = self.proc.wait(HANG_S)
        for reader in self._readers:
            reader.join(HANG_S)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(HANG_S)


@pytest.fixture
def watches():
    """Every watch a test starts is killed at its end, whatever happened."""
    started: list[Watching] = []
    yield started
    for watch in started:
        watch.kill()


def rows(out: Path) -> Counter:
    if not any(out.glob("part-*.parquet")):
        return Counter()
    table = ds.dataset(str(out), format="parquet").to_table(columns=list(COLUMNS))
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in row.values()) for row in table.to_pylist())


def paths_in(out: Path) -> set[str]:
    if not any(out.glob("part-*.parquet")):
        return set()
    return set(ds.dataset(str(out), format="parquet").to_table(columns=["path"]).column("path").to_pylist())


def wait_until_equal(watch: Watching, out: Path, want: Counter) -> None:
    """Until the watched output holds exactly `want` (the rows of a fresh run of the tree)."""
    got: Counter = Counter()

    def equal() -> bool:
        nonlocal got
        got = rows(out)
        return got == want

    try:
        watch.wait_for(equal, "settled output")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nmissing: {list((want - got).items())[:5]}\n"
                             f"extra: {list((got - want).items())[:5]}") from None


CHURN_QUIET_MS = 800  # the slow writers pause 30 ms between pieces: a read of a half-written file needs a
# stall of the generator 26 times that long


def churned(tmp_path: Path, seed: int) -> tuple[Churn, Path, Path, dict]:
    root, log = tmp_path / "tree", tmp_path / "batches.jsonl"
    churn = Churn(root, seed=seed)
    churn.seed_tree(300)
    return churn, root, tmp_path / "out.parquet", {"batch_log": str(log), "dedup": True}


def check_settled(watch: Watching, churn: Churn, root: Path, out: Path, tmp_path: Path, options: dict) -> None:
    fresh = run_fake([root], tmp_path / "fresh.parquet", {"dedup": True})
    want = rows(tmp_path / "fresh.parquet")
    assert fresh.rows == sum(want.values()) > 1000
    wait_until_equal(watch, out, want)
    assert max(Counter(key[:2] for key in rows(out).elements()).values()) == 1, "every (path, chunk) once"
    assert half_written_reads(Path(options["batch_log"]), churn) == [], "a read of a half-written file"


# --- the churn: the output equals a fresh run ----------------------------------------------------
def test_after_thousands_of_changes_the_watched_output_equals_a_fresh_run_row_for_row(tmp_path, watches):
    churn, root, out, options = churned(tmp_path, seed=11)
    watch = Watching.fake([root], out, options, watch_debounce_ms=CHURN_QUIET_MS)
    watches.append(watch)
    watch.wait_for_pass()
    churn.run(operations=2400, seconds=8.0)
    assert churn.ops["write_slowly"] > 50 and churn.ops["rename"] > 200
    check_settled(watch, churn, root, out, tmp_path, options)
    assert len(watch.passes) > 3, "changes went through while the tree churned, not all at the end"
    assert watch.stop() == 130


def test_a_watch_killed_mid_churn_and_started_again_equals_a_fresh_run(tmp_path, watches):
    churn, root, out, options = churned(tmp_path, seed=12)
    first = Watching.fake([root], out, options, watch_debounce_ms=CHURN_QUIET_MS)
    watches.append(first)
    first.wait_for_pass()
    churning = threading.Thread(target=churn.run, kwargs={"operations": 2000, "seconds": 8.0})
    churning.start()
    first.wait_for_pass(lambda line: line["succeeded"] > 0, after=1)  # killed while it works through changes
    first.kill()  # its whole process group: nothing of it writes the batch log after this
    # the killed watch's log is incomplete by construction (a batch in flight at the kill is never logged
    # while its file's other batch was), so the lines read per version are counted for the watch after it;
    # a line cut short is a half-written read whoever read it
    killed_log = Path(options["batch_log"]).rename(tmp_path / "batches-of-the-killed-watch.jsonl")
    again = Watching.fake([root], out, options, watch_debounce_ms=CHURN_QUIET_MS)
    watches.append(again)
    churning.join(HANG_S)
    check_settled(again, churn, root, out, tmp_path, options)
    cut = [problem for problem in half_written_reads(killed_log, churn) if problem.startswith("cut")]
    assert cut == [], "the killed watch read a half-written line"
    assert again.stop(signal.SIGTERM) == 143


# --- one file's changes -------------------------------------------------------------------------
def test_a_moved_file_is_renamed_without_the_model_a_touch_is_skipped_and_a_change_replaces_rows(tmp_path, watches):
    root = write_tree(tmp_path / "tree", {"a.txt": "alpha one\nalpha two\n", "b.txt": "beta\n",
                                          "sub/c.txt": "gamma old\n", "sub/d.txt": "delta\n"})
    out, log = tmp_path / "out.parquet", tmp_path / "batches.jsonl"
    watch = Watching.fake([root], out, {"batch_log": str(log), "dedup": True})
    watches.append(watch)
    watch.wait_for_paths(out, {"a.txt", "b.txt", "sub/c.txt", "sub/d.txt"})
    batches = len(log.read_text().splitlines())

    os.replace(root / "a.txt", root / "moved.txt")
    moved = watch.wait_for_pass(lambda line: line["removed"] == 1, after=len(watch.passes))
    assert (moved["succeeded"], moved["rows"]) == (1, 2)
    assert len(log.read_text().splitlines()) == batches, "the moved file's rows were copied, not made again"

    os.utime(root / "b.txt", ns=(time.time_ns(), time.time_ns() + 10**9))
    touched = watch.wait_for_pass(lambda line: line["unchanged"] == 1, after=len(watch.passes))
    assert touched["succeeded"] == 0 and len(log.read_text().splitlines()) == batches

    (root / "sub" / "c.txt").write_text("gamma new\n")
    watch.wait_for_pass(lambda line: line["succeeded"] == 1, after=len(watch.passes))
    texts = {(path, text) for path, _, text, *_ in rows(out)}
    assert ("sub/c.txt", "gamma new") in texts and ("sub/c.txt", "gamma old") not in texts
    assert {path for path, _ in texts} == {"moved.txt", "b.txt", "sub/c.txt", "sub/d.txt"}

    for name in ("c.txt", "d.txt"):
        (root / "sub" / name).unlink()
    (root / "sub").rmdir()
    watch.wait_for_paths(out, {"moved.txt", "b.txt"})
    assert watch.stop() == 130


# --- stopping, the lock, the next start ----------------------------------------------------------
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_watch_with_its_code_and_what_was_pending_is_done_by_the_next_start(
        tmp_path, watches, sig, code):
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    root = write_tree(tmp_path / "tree", {f"f{i}.txt": f"line {i}\n" for i in range(20)})
    for path in root.iterdir():  # written a minute ago: quiet already, the first pass reads them
        os.utime(path, ns=(time.time_ns() - 60 * 10**9,) * 2)
    out = tmp_path / "out.parquet"
    watch = Watching.fake([root], out, watch_debounce_ms=5_000)  # a change stays pending until the stop
    watches.append(watch)
    watch.wait_for_paths(out, {f"f{i}.txt" for i in range(20)})
    with pytest.raises(LockedError):  # the output's lock is held while it watches: a second writer exits 75
        run_fake([root], out)
    shown = CliRunner().invoke(app, ["inspect", str(out)])  # reading beside it works
    assert shown.exit_code == 0 and "running now" in shown.output and "inputs done:    20" in shown.output

    (root / "late.txt").write_text("written just before the stop\n")
    assert watch.stop(sig) == code
    assert "Traceback" not in "".join(watch.stderr)
    assert "late.txt" not in paths_in(out)
    summary = run_fake([root], out)  # the next start's first pass is this run
    assert (summary.succeeded, summary.unchanged, summary.exit_code) == (1, 20, 0)


@pytest.mark.processes
def test_a_worker_lost_while_watching_is_restarted_and_the_watch_goes_on(tmp_path, watches):
    root = write_tree(tmp_path / "tree", {"a.txt": "first\n"})
    out, log = tmp_path / "out.parquet", tmp_path / "batches.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "GPUCLI_TEST_INPROCESS_WORKERS"}  # real worker processes
    watch = Watching.fake([root], out, {"batch_log": str(log)}, env=env)
    watches.append(watch)
    watch.wait_for_paths(out, {"a.txt"})
    worker = json.loads(log.read_text().splitlines()[-1])["pid"]
    os.kill(worker, signal.SIGKILL)
    (root / "b.txt").write_text("after the worker died\n")
    watch.wait_for_paths(out, {"a.txt", "b.txt"})  # a file written after the death
    assert json.loads(log.read_text().splitlines()[-1])["pid"] != worker
    assert watch.stop() == 130


# --- the command line, and a store that fails -----------------------------------------------------
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the default model's tokenizer: real embed code, fast."""
    from benchmarks.host import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def embed_watch(root: Path, out: Path, model: Path, *extra: str) -> Watching:
    return Watching([sys.executable, "-m", "gpucli", "embed", str(root), "--out", str(out), "--model", str(model),
                     "--watch", "--watch-debounce-ms", "300", "--json", "--progress", "plain", "--devices", "cpu",
                     *extra], {**os.environ, "GPUCLI_BACKEND": "torch"})


def test_embed_watch_prints_a_json_line_per_pass_and_its_summary_and_a_second_writer_exits_75(
        tmp_path, watches, tiny_bert):
    root = write_tree(tmp_path / "tree", {"a.txt": "a short note\n", "b.md": "# a heading\n\nand a paragraph\n"})
    out = tmp_path / "out.parquet"
    watch = embed_watch(root, out, tiny_bert)
    watches.append(watch)
    watch.wait_for_paths(out, {"a.txt", "b.md"})
    passes = len(watch.passes)
    (root / "c.txt").write_text("a third note, saved later\n")
    assert watch.wait_for_pass(after=passes)["succeeded"] == 1
    second = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(root), "--out", str(out), "--model",
                             str(tiny_bert), "--progress", "off"], capture_output=True, text=True, cwd=ROOT,
                            timeout=HANG_S)
    assert second.returncode == 75, second.stderr
    assert watch.stop() == 130
    summary = watch.lines[-1]
    assert (summary["exit_code"], summary["succeeded"], summary["interrupted"]) == (130, 3, True)
    assert {line["kind"] for line in watch.passes} == {"start", "changes"}


def test_a_watch_whose_output_fails_exits_3_and_frees_the_lock(tmp_path, watches, tiny_bert):
    """A sink that cannot write (here a full disk; a store's own retries spent) ends the watch with
    exit 3 and one line, so that its supervisor restarts it; the next start finds the lock free."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    assert mounted.returncode == 0, f"this test needs root to mount a tmpfs: {mounted.stderr}"
    try:
        root = write_tree(tmp_path / "tree", {"a.txt": "a short note\n"})
        out = disk / "out.parquet"
        watch = embed_watch(root, out, tiny_bert)
        watches.append(watch)
        watch.wait_for_paths(out, {"a.txt"})
        words = "river stone cloud field harbour lantern meadow orchard quarry summit valley willow".split()
        write_tree(root, {f"d/doc{i:03d}.txt": " ".join(words[(i + j) % 12] for j in range(300)) for i in range(100)})
        assert watch.ended() == 3
        errors = [line for line in "".join(watch.stderr).splitlines() if line.startswith("gpucli: error:")]
        assert len(errors) == 1 and "No space left" in errors[0], "".join(watch.stderr)[-2000:]
        assert watch.lines[-1]["exit_code"] == 3
        lock = RunLock(Path(f"{out}.gpucli"))  # the supervisor's restart will find the lock free
        lock.acquire(str(out))
        lock.release()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_watch_rides_out_a_store_restart_and_exits_3_once_the_store_stays_down(tmp_path, watches):
    """PostgreSQL: a transaction that meets a restarted server is tried again on a new connection;
    once the store's retries are spent the watch exits 3, for its supervisor to restart it."""
    from tests.pg_server import PgServer

    pg = PgServer()
    try:
        database = pg.new_database()
        root = write_tree(tmp_path / "tree", {"a.txt": "first note\n"})
        os.utime(root / "a.txt", ns=(time.time_ns() - 60 * 10**9,) * 2)
        env = {**os.environ, "GPUCLI_PG_RETRIES": "4", "GPUCLI_PG_RETRY_S": "5", "GPUCLI_PG_BACKOFF_S": "0.2"}
        watch = Watching.fake([root], pg.out(database), env=env)
        watches.append(watch)

        def stored() -> set[str]:
            if not pg.execute(database, "select to_regclass('docs') is not null")[0][0]:
                return set()
            return {path for path, in pg.execute(database, "select path from docs")}

        watch.wait_for(lambda: stored() == {"a.txt"}, "the first pass's rows")
        pg.restart()  # an immediate stop and a start: the server crashed, as it sees it
        (root / "b.txt").write_text("written after the restart\n")
        watch.wait_for(lambda: stored() == {"a.txt", "b.txt"}, "the rows of a file written after the restart")
        pg.ctl("-m", "immediate", "stop")  # and now down for good
        (root / "c.txt").write_text("written while the store is down\n")
        assert watch.ended() == 3
        errors = [line for line in "".join(watch.stderr).splitlines() if line.startswith("gpucli: error:")]
        assert len(errors) == 1 and "attempts" in errors[0], "".join(watch.stderr)[-2000:]
    finally:
        pg.stop()


# --- a bucket root: polled -----------------------------------------------------------------------
def test_a_bucket_root_is_listed_again_every_poll_interval(tmp_path, watches):
    from tests.s3_server import S3Server

    server = S3Server()
    try:
        server.put_tree("watched", {"a.txt": "in the bucket\n", "b.txt": "also there\n"}, prefix="tree/")
        out = tmp_path / "out.parquet"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **server.env()}
        watch = Watching.fake(["s3://watched/tree"], out, env=env, watch_poll_s=0.5)
        watches.append(watch)
        watch.wait_for_paths(out, {"a.txt", "b.txt"})
        client = server.client()
        client.put_object(Bucket="watched", Key="tree/c.txt", Body=b"uploaded later\n")
        client.delete_object(Bucket="watched", Key="tree/a.txt")
        listed = watch.wait_for_pass(lambda line: line["removed"] == 1)  # the bucket's next listing
        assert listed["kind"] == "rescan" and paths_in(out) == {"b.txt", "c.txt"}
        assert watch.stop() == 130
    finally:
        server.stop()
