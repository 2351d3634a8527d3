"""A command leaves once its outcome is out (issue 41: a full disk printed its error and its
summary, then never exited). The hang was multiprocessing's: a reader process killed while it
sent a large chunk back left the executor's manager thread waiting for the rest of that message
and the call queue's feeder waiting to send to readers that were gone, and multiprocessing joins
that feeder at exit. Each case runs in an interpreter of its own, as the console script does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import ROOT

HANG_S = 120  # only catches a hang; nothing here asserts how fast anything is

READERS_KILLED_MID_SEND = textwrap.dedent('''
    import json, os, signal, sys, threading, time
    from pathlib import Path

    from gpucli.app.boundary import exit_without_teardown
    from gpucli.core.records import Source
    from gpucli.engines.reader import ReaderProcesses
    from gpucli.tasks.base import TaskSpec

    big = Path(sys.argv[1])
    big.write_text("".join(f"line {i} of a long file\\n" for i in range(600_000)))
    st = big.stat()
    readers = ReaderProcesses(TaskSpec("tests.fake_task:FakeTask", "fake-model"), 1)
    first = readers.submit([Source(0, "big.txt", str(big), st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino)],
                           1 << 30, None)
    # the next chunk is larger than a pipe holds: the feeder is mid-send while the reader is busy
    many = [Source(i, "gone/" + "n" * 300 + str(i), "/nonexistent/" + "n" * 300 + str(i)) for i in range(1, 600)]
    second = readers.submit(many, 1 << 30, None)
    import multiprocessing
    reader, = multiprocessing.active_children()
    deadline = time.monotonic() + 100
    while "pipe_write" not in Path(f"/proc/{reader.pid}/wchan").read_text():  # sending its result back
        assert time.monotonic() < deadline, "the reader never sent its chunk back"
        time.sleep(0.0005)
    os.kill(reader.pid, signal.SIGSTOP)  # frozen mid-message: the parent holds part of it
    readers.close()
    end = time.monotonic() + 15
    while time.monotonic() < end and [t for t in threading.enumerate() if t is not threading.main_thread()]:
        time.sleep(0.05)
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(json.dumps({"threads_left": left}), flush=True)
    exit_without_teardown(SystemExit(0))
''')

CHUNKS_OF_A_STOPPED_RUN = textwrap.dedent('''
    import asyncio, json, sys, threading
    from pathlib import Path

    from gpucli.core.records import Source
    from gpucli.engines.reader import ReaderProcesses
    from gpucli.tasks.base import TaskSpec

    errors = []
    threading.excepthook = lambda hook: errors.append(repr(hook.exc_value))
    text = Path(sys.argv[1])
    text.write_text("one line\\n")
    st = text.stat()

    def chunk(i):
        return [Source(i, f"a{i}.txt", str(text), st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino)]

    readers = ReaderProcesses(TaskSpec("tests.fake_task:FakeTask", "fake-model"), 1)

    async def stopped_run():
        futures = [readers.submit(chunk(i), 1 << 20, None) for i in range(8)]  # most wait in the pool
        awaiting = [asyncio.ensure_future(readers.result(f, chunk(i))) for i, f in enumerate(futures)]
        await asyncio.sleep(0)
        for task in awaiting:  # what a stop does to the chunks in flight (reader.read_chunks)
            task.cancel()
        await asyncio.gather(*awaiting, return_exceptions=True)
        return futures

    futures = asyncio.run(stopped_run())
    cancelled = sum(f.cancelled() for f in futures)
    readers.close()
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(60)
    print(json.dumps({"cancelled_by_the_run": cancelled, "thread_errors": errors}), flush=True)
''')

READER_STARTED_AS_THE_RUN_STOPS = textwrap.dedent('''
    import json, multiprocessing, sys, threading
    import multiprocessing.process as mp_process
    from pathlib import Path

    from gpucli.app.boundary import exit_without_teardown
    from gpucli.core.records import Source
    from gpucli.engines.reader import ReaderProcesses
    from gpucli.tasks.base import TaskSpec

    text = Path(sys.argv[1])
    text.write_text("one line\\n")
    st = text.stat()
    readers = ReaderProcesses(TaskSpec("tests.fake_task:FakeTask", "fake-model"), 1)
    starting, closing = threading.Event(), threading.Event()
    start = mp_process.BaseProcess.start

    def start_once_closing(process):  # the reader starts just as the run's stop closes the pool
        starting.set()
        closing.wait(60)
        start(process)

    shutdown = readers._pool.shutdown

    def shutdown_saying_so(*args, **kwargs):
        closing.set()
        return shutdown(*args, **kwargs)

    mp_process.BaseProcess.start = start_once_closing
    readers._pool.shutdown = shutdown_saying_so
    source = Source(0, "a.txt", str(text), st.st_size, st.st_mtime_ns, "", st.st_dev, st.st_ino)
    walk = threading.Thread(target=readers.submit, args=([source], 1 << 20, None))  # the walk's thread
    walk.start()
    assert starting.wait(60)
    readers.close()
    walk.join(60)
    readers.join(60)
    alive = [p.pid for p in multiprocessing.active_children() if p.is_alive()]
    for process in multiprocessing.active_children():  # the test fails, but leaves nothing behind
        process.kill()
    print(json.dumps({"readers_alive": alive}), flush=True)
    exit_without_teardown(SystemExit(0))
''')

STUCK_EXIT_HANDLER = textwrap.dedent('''
    import atexit, time

    from gpucli.app import boundary

    boundary.EXIT_HANDLERS_S = 1.0
    atexit.register(time.sleep, 3600)  # a library's handler that waits on something gone
    print("done", flush=True)
    boundary.exit_without_teardown(SystemExit(4))
''')


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=HANG_S)


def test_readers_killed_mid_send_leave_no_thread_waiting_and_the_process_exits(tmp_path: Path):
    result = run_script(READERS_KILLED_MID_SEND, str(tmp_path / "big.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[0]) == {"threads_left": []}
    assert "exit handlers did not finish" not in result.stderr, result.stderr[-3000:]


def test_a_stop_that_drops_the_chunks_in_flight_leaves_the_reader_pool_consistent(tmp_path: Path):
    """A stopped run cancels the tasks awaiting its chunks; that cancel reached the pool's futures,
    and once `close` killed the readers the pool's manager thread died on them with a traceback
    on stderr (InvalidStateError: CANCELLED, CPython 3.11), after a SIGTERM exit's one line."""
    result = run_script(CHUNKS_OF_A_STOPPED_RUN, str(tmp_path / "a.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[0]) == {"cancelled_by_the_run": 0, "thread_errors": []}
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_a_reader_started_while_the_stop_closes_the_pool_is_killed_too(tmp_path: Path):
    """The walk's thread may be starting a reader process when the stop closes the pool (issue
    46): that reader was not in the table `close` looked at, and was left alive; the exit waited
    for it, then left without it, and it stayed for good, blocked on a result nobody read, with
    the caller's pipes open (a stop-at-start test hung on them). The pool's semaphores are
    unlinked and unregistered by `join`, so the resource tracker has nothing to report."""
    result = run_script(READER_STARTED_AS_THE_RUN_STOPS, str(tmp_path / "a.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[0]) == {"readers_alive": []}
    assert "resource_tracker" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]


def test_an_exit_handler_that_never_returns_does_not_keep_the_process(tmp_path: Path):
    result = run_script(STUCK_EXIT_HANDLER)
    assert (result.returncode, result.stdout) == (4, "done\n")
    assert "gpucli: note: the exit handlers did not finish within 1s" in result.stderr
