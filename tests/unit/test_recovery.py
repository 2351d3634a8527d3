"""The recovery policy's decisions (gpucli/engines/recovery.py), as plain unit tests: no processes."""

from __future__ import annotations

import itertools

import numpy as np

from gpucli.core.records import Batch, FailureKind, Items, Ragged
from gpucli.engines import recovery
from gpucli.engines.batching import BatchCaps


def batch(n: int, attempts: int = 0, batch_id: int = 1) -> Batch:
    ids = np.arange(n, dtype=np.int64)
    payload = Ragged(np.arange(n * 3, dtype=np.int32), ids * 3, np.full(n, 3, np.int64))
    return Batch(batch_id, Items(ids + 100, np.zeros(n, np.int64), np.full(n, 3, np.int64), payload,
                                 {"text": np.array([f"t{i}" for i in ids], dtype=object)}), attempts)


def ids():
    counter = itertools.count(1000)
    return lambda: next(counter)


def test_an_error_in_a_batch_halves_it_and_keeps_every_column_aligned():
    actions = recovery.after_error(batch(5), FailureKind.ERROR, "boom", ids())
    assert all(isinstance(a, recovery.Resend) for a in actions)
    halves = [a.batch.items for a in actions]
    assert [len(h) for h in halves] == [2, 3]
    for half in halves:  # the source, text and token ids of each item still belong together
        for i in range(len(half)):
            k = int(half.source_ids[i]) - 100
            assert half.meta["text"][i] == f"t{k}" and half.payload.row(i).tolist() == [3 * k, 3 * k + 1, 3 * k + 2]


def test_a_single_item_that_fails_becomes_a_failure_with_the_reason():
    (action,) = recovery.after_error(batch(1), FailureKind.OOM, "CUDA out of memory", ids())
    assert isinstance(action, recovery.Fail) and action.reason == "out of memory even alone: CUDA out of memory"


def test_a_death_resends_the_running_batch_once_then_splits_it():
    running, waiting = batch(4, batch_id=1), batch(4, batch_id=2)
    first = recovery.after_death([running, waiting], "killed by SIGKILL", ids())
    assert [type(a) for a in first] == [recovery.Resend, recovery.Resend]
    assert first[0].batch.attempts == 1 and first[1].batch.attempts == 0, "only the running batch is blamed"
    second = recovery.after_death([first[0].batch], "killed by SIGKILL", ids())
    assert [len(a.batch) for a in second] == [2, 2]
    assert all(a.batch.attempts == recovery.DEATHS_BEFORE_SPLIT - 1 for a in second)


def test_a_poison_item_alone_that_kills_again_fails():
    (action,) = recovery.after_death([batch(1, attempts=1)], "exit code 3", ids())
    assert isinstance(action, recovery.Fail) and "worker crashed on this input (exit code 3)" in action.reason


def test_batches_of_a_worker_that_died_loading_are_resent_as_they_are():
    waiting = [batch(3, batch_id=7), batch(2, batch_id=8)]
    assert [a.batch for a in recovery.after_unstarted(waiting)] == waiting


def test_repeated_out_of_memory_halves_the_caps_once_it_repeats():
    caps = BatchCaps(64, 16384, 0.01)
    assert recovery.caps_after_oom(caps, 64, 1) is None
    assert recovery.caps_after_oom(caps, 64, 2) == BatchCaps(32, 8192, 0.01)
    assert recovery.caps_after_oom(caps, 1, 5) is None, "a batch of one cannot shrink"
    small = BatchCaps(8, 1, 0.01)  # halving a cost cap of 1 must not lift it (0 = no cap)
    assert recovery.caps_after_oom(small, 8, 2).max_cost == 1 and small.halved().max_cost == 1
    assert BatchCaps(8).halved().max_cost == 0, "no cap stays no cap"


def test_a_single_item_that_raised_fails_with_the_error_alone():
    (action,) = recovery.after_error(batch(1), FailureKind.ERROR, "ValueError: BOOM", ids())
    assert isinstance(action, recovery.Fail) and action.reason == "ValueError: BOOM"


def test_the_caps_go_down_on_the_second_out_of_memory_error_and_the_run_is_told_once():
    history = recovery.OomHistory(BatchCaps(64, 16384, 0.01))
    history, said = recovery.after_oom(history, 64)
    assert said == "" and history.caps == BatchCaps(64, 16384, 0.01) and history.events == 1
    history, said = recovery.after_oom(history, 64)
    assert history.caps == BatchCaps(32, 8192, 0.01)
    assert said == "out of memory 2 times: batch size lowered to 32, cost cap to 8192"
    history, said = recovery.after_oom(history, 64)  # a batch cut before the caps went down
    assert said == "" and history.caps.max_items == 32, "only batches the caps allowed lower them"


def test_restarts_back_off_and_stop_at_the_budget():
    assert recovery.restart_delay(1) < recovery.restart_delay(3) <= 5.0
    assert recovery.may_restart(15, 16) and not recovery.may_restart(16, 16)


def test_the_restart_backoff_grows_with_deaths_in_a_row_and_a_result_resets_it():
    restarts = recovery.Restarts(budget=3)
    first, second = restarts.after_death(), restarts.after_death()
    assert first < second
    restarts.after_success()
    assert restarts.after_death() == first and restarts.used == 3
    assert restarts.after_death() is None, "the budget is spent"
