"""How a text task uses the host: reader processes or threads for the parent's tokenizing, and
workers per core for its model, by the model's size (weights per layer). Measured choices: the
figures are in each docstring."""

from __future__ import annotations

from gpucli.models.devices import all_cpu
from gpucli.tasks.base import per_core

CPU_READS_IN_THREADS = 8  # cores up to which a CPU-only run of a real model reads in the parent's threads
REAL_MODEL_WEIGHTS = 1_000_000  # transformer weights (embeddings aside) from which a model gets a worker per core


def reader_processes(layer_weights: int, cores: int, devices: list[str]) -> int:
    """Tokenizing is the parent's heaviest work: in reader processes the event loop, the
    accounting and the writer keep a core. Measured, 100k one-sentence files, null device, 2
    cores: 10.7 s with one reader process against 12.0 s in reader threads (plain loop 5.3-6.4 s);
    then, interleaved on a busy machine, two reader processes 8.5 / 9.3 s against one 10.4 /
    10.3 s: with one, the reader was the run's critical path (its busy time ~ the wall time)
    while the parent's core had room. An idle reader costs only its memory (~60 MB).

    Not when the workers run a model of real size on up to CPU_READS_IN_THREADS cores: they
    take every core, the model is the critical path (~400 one-sentence texts/s on 2 cores,
    where the parent reads in threads at ~8,000 files/s), and a reader process only adds its
    start (~0.25 s of CPU) beside the workers' imports. Measured, default model, 2 cores,
    interleaved, medians of 3: 2000 one-sentence files 9.89 s in threads against 10.26 s with
    two reader processes (workers ready 4.88 / 5.35 s; 415 / 408 texts/s after), 480 texts of
    ~230 tokens 20.97 against 21.36 s. On more cores the model's rate nears what one parent
    reads (int8 on 16 cores: ~7,000 texts/s), so reader processes stay there."""
    if all_cpu(devices) and cores <= CPU_READS_IN_THREADS and layer_weights >= REAL_MODEL_WEIGHTS:
        return 0
    return 1 if cores < 2 else max(2, min(4, cores // 4))


def cpu_workers(layer_weights: int, cores: int) -> int:
    """A worker per core (up to 4, each a copy of the model; the cores' threads are shared among
    them, so on up to 4 cores each is single-threaded) for a model of real size; one worker for a toy one, whose forward costs less than a second worker's start (torch
    and transformers: ~4 s of CPU). Several batches at once on one thread each beat one batch on
    all threads: no OpenMP barrier per operator, no sleeping threads to wake (PASSIVE, see
    worker.limit_threads). Measured, default model, 2 cores, interleaved, docs/s from every
    worker ready: 2000 one-sentence files 419 / 425 / 417 with two workers against 344 / 359 /
    375 with one of two threads; 300 texts of ~230 tokens 27.6 / 30.0 / 30.0 against 25.4 / 25.9 /
    27.2; end to end 9.6 / 9.0 / 9.5 s against 10.7 / 9.8 / 9.7 s (short)."""
    return per_core(cores) if layer_weights >= REAL_MODEL_WEIGHTS else 1
