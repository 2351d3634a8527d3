"""gpucli/inputs/documents/sandbox.py: typed calls in child processes under a time limit and a memory
cap, and typed replies."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gpucli.core.errors import InputError
from gpucli.inputs.documents.sandbox import Limits, Sandbox
from tests.sandbox_calls import Allocate, Bug, Die, Echo, Pid, Refuse, Sleep, act

pytestmark = pytest.mark.slow  # spawns processes

@pytest.fixture
def pool():
    pool = Sandbox(act, 2, Limits(timeout_s=2.0, memory_mb=1024))
    yield pool
    pool.close()


def test_results_come_back_in_the_order_of_the_calls(pool):
    calls = [Echo(str(i)) for i in range(20)]
    assert pool.map(calls) == [str(i) for i in range(20)]


def test_an_input_error_raised_in_the_child_is_returned_with_its_stage(pool):
    [got] = pool.map([Refuse("encrypted PDF")])
    assert isinstance(got, InputError) and got.stage == "decode" and str(got) == "encrypted PDF"


def test_a_call_past_its_time_limit_is_stopped_and_the_others_go_on(pool):
    got = pool.map([Sleep(60), Echo("a"), Echo("b")])
    assert isinstance(got[0], InputError) and "took over 2 s" in str(got[0]) and "--extract-timeout" in str(got[0])
    assert got[1:] == ["a", "b"]
    assert pool.map([Echo("after")]) == ["after"]  # the killed child was replaced


def test_a_child_that_dies_costs_its_call_only(pool):
    got = pool.map([Die(), Echo("a")])
    assert isinstance(got[0], InputError) and "died" in str(got[0])
    assert got[1] == "a"
    assert pool.map([Echo("b")]) == ["b"]


def test_memory_past_the_cap_is_a_failure_not_the_hosts_oom(pool):
    [got] = pool.map([Allocate(4 << 30)])
    assert isinstance(got, InputError) and "memory" in str(got)


def test_a_bug_in_the_function_is_one_failure(pool):
    [got] = pool.map([Bug()])
    assert isinstance(got, InputError) and "ZeroDivisionError" in str(got)


def test_threads_share_the_children_and_never_start_more_than_the_size(pool):
    results: list[list] = []

    def call(k: int) -> None:
        results.append(pool.map([Pid()] * 4))

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    pids = {pid for got in results for pid in got}
    assert len(results) == 4 and 1 <= len(pids) <= 2 and os.getpid() not in pids


def test_children_leave_when_the_pool_closes():
    pool = Sandbox(act, 1, Limits(timeout_s=5.0))
    [pid] = pool.map([Pid()])
    pool.close()
    deadline = time.monotonic() + 10  # a hang guard, not a speed check
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its pool")


def test_close_kills_a_busy_child_and_its_call_gets_a_failure():
    pool = Sandbox(act, 1, Limits(timeout_s=60.0))
    got: list = []
    thread = threading.Thread(target=lambda: got.extend(pool.map([Sleep(60)])))
    thread.start()
    time.sleep(1.0)  # the call is running in the child
    pool.close()
    thread.join(20)  # a hang guard
    assert not thread.is_alive() and isinstance(got[0], InputError)
