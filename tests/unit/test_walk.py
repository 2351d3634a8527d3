"""The walk and the byte reading: what is an input, under which name, and which file is read.

Unit tests, no processes: `walk` over small trees, `read_chunk` on what it yields.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from gpucli.core.records import Item, Source
from gpucli.engines.reader import read_chunk
from gpucli.inputs.scope import WalkFilter, WalkReport
from gpucli.inputs.walk import walk
from gpucli.tasks import Task, TaskSpec
from tests.helpers import unlistable

TXT = WalkFilter((".txt",))
EMBED_LIKE = WalkFilter((".txt", ".json", ".jsonl"))  # the embed task reads .json and .jsonl too


def paths(roots, flt=TXT, **kw) -> list[str]:
    return [f.source.path for f in walk([str(r) for r in roots], flt, **kw) if f.source]


def lines(source: Source, data: bytes) -> list[Item]:
    return [Item(source.id, 0, data.decode(), 1, {})]


class _Lines(Task):
    name = "lines"

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        return lines(source, data)


def read_source(source: Source, prepare, max_bytes: int) -> SimpleNamespace:
    """One file through the reader, as the engines read it: its items, or its failure record."""
    chunk = read_chunk([source], _Lines(TaskSpec("lines", "none")), max_bytes)
    items = [SimpleNamespace(payload=p) for p in chunk.block.payload] if chunk.block is not None else None
    return SimpleNamespace(items=items, failure=chunk.failures[0] if chunk.failures else None)




# --- item 1: what the walk could not see --------------------------------------------------------

def test_an_unlistable_subdirectory_is_reported_and_nothing_under_it_may_be_pruned(tree, monkeypatch):
    root = tree({"a.txt": "a", "sub/b.txt": "b", "sub/deeper/c.txt": "c", "subway/d.txt": "d"})
    unlistable(monkeypatch, root / "sub")
    report = WalkReport()
    found = list(walk([str(root)], TXT, report=report))
    assert [f.source.path for f in found if f.source] == ["a.txt", "subway/d.txt"]
    assert [(f.failure.path, f.failure.stage) for f in found if f.failure] == [("sub", "read")]
    assert report.complete and report.unlisted == ["sub"] and report.empty_roots == []
    assert not report.may_prune("sub/b.txt") and not report.may_prune("sub/deeper/c.txt")
    assert report.may_prune("gone.txt") and report.may_prune("subway/gone.txt")
    assert any("'sub' could not be listed" in note for note in report.notes())


def test_an_unlistable_root_prunes_nothing(tree, monkeypatch):
    root = tree({"a.txt": "a"})
    unlistable(monkeypatch, root)
    report = WalkReport()
    found = list(walk([str(root)], TXT, report=report))
    assert [f.failure.stage for f in found] == ["read"]
    assert report.unlisted == ["."]
    assert not report.may_prune("a.txt") and not report.may_prune("x/y.txt", allow_empty=True)


def test_an_empty_root_prunes_nothing_unless_allowed(tmp_path):
    (tmp_path / "share").mkdir()  # an unmounted share is an empty directory
    report = WalkReport()
    assert list(walk([str(tmp_path / "share")], TXT, report=report)) == []
    assert report.empty_roots == ["."]
    assert not report.may_prune("a.txt")
    assert report.may_prune("a.txt", allow_empty=True)
    assert "empty" in report.notes()[0] and report.notes(allow_empty=True) == []


def test_with_several_roots_only_paths_under_a_listed_root_may_be_pruned(tree):
    base = tree({"a/x.txt": "x", "b/only.md": "not wanted", "c/y.txt": "y"})
    report = WalkReport()
    assert paths([base / "a", base / "b"], report=report) == ["a/x.txt"]
    assert report.roots == ["a", "b"] and report.empty_roots == ["b"]
    assert report.may_prune("a/gone.txt")
    assert not report.may_prune("b/gone.txt"), "b found nothing: maybe unmounted"
    assert not report.may_prune("c/y.txt"), "c was not walked in this run"
    assert not report.may_prune("ab/z.txt")


def test_an_unfinished_walk_prunes_nothing(tree):
    root = tree({"a.txt": "a", "b.txt": "b"})
    report = WalkReport()
    found = walk([str(root)], TXT, report=report)
    next(found)
    assert not report.complete and not report.may_prune("gone.txt")


# --- item 6: the output never reads itself ------------------------------------------------------

def test_the_output_its_failures_file_and_its_state_are_not_inputs(tree):
    root = tree({"doc.txt": "d", "out.jsonl": '{"path": "doc.txt"}\n', "out.failures.jsonl": "",
                 "out.jsonl.gpucli/ledger.json": "{}", "ds.parquet/_gpucli/x.txt": "state",
                 "ds.parquet/notes.txt": "inside the output", "sub/other.jsonl": "{}\n"})
    excluded = [root / "out.jsonl", root / "out.failures.jsonl", root / "out.jsonl.gpucli", root / "ds.parquet"]
    assert paths([root], EMBED_LIKE, exclude=excluded) == ["doc.txt", "sub/other.jsonl"]


def test_exclusion_is_by_real_path(tree, tmp_path):
    root = tree({"doc.txt": "d", "out.jsonl": "{}\n"})
    os.symlink(root, tmp_path / "alias")
    os.symlink(root / "out.jsonl", root / "link.jsonl")  # a link to the output is the output
    assert paths([tmp_path / "alias"], EMBED_LIKE, exclude=[str(root / "out.jsonl")]) == ["doc.txt"]
    # and an excluded path given through a link excludes its target
    assert paths([root], EMBED_LIKE, exclude=[str(tmp_path / "alias" / "out.jsonl")]) == ["doc.txt"]


def test_a_root_inside_the_output_yields_nothing_and_prunes_nothing(tree):
    root = tree({"ds.parquet/a.txt": "a"})
    report = WalkReport()
    assert paths([root / "ds.parquet"], exclude=[root / "ds.parquet"], report=report) == []
    assert not report.may_prune("a.txt")


# --- item 7: one input per real file ------------------------------------------------------------

def test_a_directory_and_a_file_inside_it_give_the_file_once(tree):
    base = tree({"docs/a.txt": "a", "docs/b.txt": "b"})
    assert paths([base / "docs", base / "docs" / "a.txt"]) == ["a.txt", "b.txt"]
    assert paths([base / "docs" / "a.txt", base / "docs"]) == ["a.txt", "b.txt"]


def test_overlapping_roots_and_a_root_given_twice_give_each_file_once(tree):
    base = tree({"docs/a.txt": "a", "docs/sub/b.txt": "b", "docs/sub/c.txt": "c"})
    sub = base / "docs" / "sub"
    assert paths([sub / "b.txt", sub / "c.txt", base / "docs", sub, sub / "b.txt"]) == \
        ["a.txt", "sub/b.txt", "sub/c.txt"]
    assert paths([sub / "b.txt", sub / "b.txt"]) == ["b.txt"]


def test_a_link_to_a_file_the_walk_reaches_is_not_a_second_input(tree):
    root = tree({"a.txt": "a", "versions/v2.txt": "two", ".hidden/v1.txt": "one"})
    os.symlink(root / "versions" / "v2.txt", root / "current.txt")
    os.symlink("a.txt", root / "also-a.txt")
    os.symlink(root / ".hidden" / "v1.txt", root / "old.txt")  # its target is never walked: the link names it
    os.symlink(root / ".hidden" / "v1.txt", root / "old-again.txt")
    assert paths([root]) == ["a.txt", "old-again.txt", "versions/v2.txt"]


def test_a_link_whose_target_is_filtered_out_still_names_it(tree):
    root = tree({"data.bin": "text in a file named .bin"})
    os.symlink(root / "data.bin", root / "data.txt")
    [found] = [f for f in walk([str(root)], TXT) if f.source]
    assert found.source.path == "data.txt"
    assert read_source(found.source, lines, 1 << 20).items[0].payload == "text in a file named .bin"


# --- item 11: any name the file system allows ---------------------------------------------------

def test_names_that_are_not_utf8_become_valid_text_and_the_file_still_opens(tmp_path):
    raw = os.fsencode(tmp_path) + b"/caf\xe9 \xff.txt"
    with open(raw, "wb") as f:
        f.write(b"latin-1 name")
    Path(tmp_path, "line\nbreak and 中文.txt").write_text("ok")
    found = [f.source for f in walk([str(tmp_path)], TXT) if f.source]
    assert [s.path for s in found] == ["caf\\xe9 \\xff.txt", "line\nbreak and 中文.txt"]
    for source in found:
        source.path.encode("utf-8")  # no surrogates: SQLite, Parquet and JSON take it
        assert read_source(source, lines, 1 << 20).failure is None
    assert os.fsencode(found[0].abspath) == raw


def test_an_undecodable_directory_name_is_escaped_in_failure_records_too(tmp_path, monkeypatch):
    bad = os.fsencode(tmp_path) + b"/d\xe9j\xe0"
    os.mkdir(bad)
    unlistable(monkeypatch, Path(os.fsdecode(bad)))
    report = WalkReport()
    [found] = list(walk([str(tmp_path)], TXT, report=report))
    assert found.failure.path == "d\\xe9j\\xe0" and report.unlisted == ["d\\xe9j\\xe0"]


# --- item 16: the read opens the file the walk found, or fails ----------------------------------

def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(tree, tmp_path):
    root = tree({"a.txt": "mine"})
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    [found] = [f.source for f in walk([str(root)], TXT) if f.source]
    (root / "a.txt").unlink()
    os.symlink(secret, root / "a.txt")
    result = read_source(found, lines, 1 << 20)
    assert result.items is None and result.failure.stage == "read"
    assert "symbolic link" in result.failure.error


def test_a_directory_swapped_for_a_link_after_the_walk_is_not_read(tree, tmp_path):
    root = tree({"sub/a.txt": "mine"})
    elsewhere = tree({"a.txt": "not yours"}, name="elsewhere")
    [found] = [f.source for f in walk([str(root)], TXT) if f.source]
    (root / "sub").rename(tmp_path / "moved")
    os.symlink(elsewhere, root / "sub")
    result = read_source(found, lines, 1 << 20)
    assert result.items is None and result.failure.stage == "read"
    assert "replaced" in result.failure.error


def test_the_target_of_an_accepted_link_replaced_after_the_walk_is_not_read(tree):
    root = tree({"a.txt": "mine"})
    os.symlink(root / ".." / "in" / "a.txt", root / "link.txt")  # inside the root, but not its real path
    [found] = [f.source for f in walk([str(root)], WalkFilter((".txt",), include=("link.txt",))) if f.source]
    assert found.path == "link.txt"
    assert read_source(found, lines, 1 << 20).items[0].payload == "mine", "an accepted link is read"
    (root / "new.tmp").write_text("a new file under the old name")
    os.replace(root / "new.tmp", root / "a.txt")
    result = read_source(found, lines, 1 << 20)
    assert result.failure is not None and result.failure.stage == "read"


def test_the_walk_records_device_and_inode_and_an_in_place_rewrite_is_still_read(tree):
    root = tree({"a.txt": "first"})
    [found] = [f.source for f in walk([str(root)], TXT) if f.source]
    st = os.stat(root / "a.txt")
    assert (found.dev, found.ino) == (st.st_dev, st.st_ino)
    (root / "a.txt").write_text("second")
    assert read_source(found, lines, 1 << 20).items[0].payload == "second"


def test_the_walk_comes_in_bounded_blocks_numbered_in_order(tmp_path, monkeypatch):
    """Blocks of a directory's entries (never more than WALK_BLOCK at once, however large the
    directory), failure records in place, sources numbered 0, 1, 2, ... in walk order: the
    same inputs, in the same order, as one at a time."""
    import gpucli.inputs.walk as walk_module

    monkeypatch.setattr(walk_module, "WALK_BLOCK", 7)
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        for i in range(10):
            (tmp_path / d / f"{i:02d}.txt").write_text("x")
    os.symlink(tmp_path / "missing", tmp_path / "a" / "05b.txt")  # a dangling link: a failure record
    blocks = list(walk_module.walk_blocks([str(tmp_path)], TXT))
    assert all(0 < len(b) <= 7 for b in blocks)
    entries = [e for b in blocks for e in b]
    sources = [e for e in entries if isinstance(e, Source)]
    assert [s.id for s in sources] == list(range(20))
    assert [e.path for e in entries] == [f.source.path if f.source else f.failure.path
                                         for f in walk([str(tmp_path)], TXT)]
    assert [e.path for e in entries if not isinstance(e, Source)] == ["a/05b.txt"]


# --- other gpucli outputs inside the tree (issue 33, case 6) ------------------------------------------
def _outputs_tree(root: Path) -> None:
    """The user's files, and what earlier gpucli runs wrote into the same tree."""
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.txt").write_text("alpha\n")
    (root / "data.jsonl").write_text('{"mine": 1}\n')  # a user's JSON lines file: no state beside it
    (root / "vectors.jsonl").write_text('{"path": "notes/a.txt", "chunk": 0}\n')
    (root / "vectors.jsonl.gpucli").mkdir()
    (root / "vectors.jsonl.gpucli" / "ledger.sqlite").write_bytes(b"")
    (root / "vectors.jsonl.gpucli" / "lock").write_text("")
    (root / "vectors.failures.jsonl").write_text("")
    (root / "sub" / "rows.parquet" / "_gpucli").mkdir(parents=True)
    (root / "sub" / "rows.parquet" / "_gpucli" / "ledger.sqlite").write_bytes(b"")
    (root / "sub" / "rows.parquet" / "part-00000.parquet").write_bytes(b"PAR1")
    (root / "sub" / "rows.parquet" / "notes.txt").write_text("inside an output\n")
    (root / "sub" / "rows.failures.jsonl").write_text('{"path": "x.txt", "stage": "decode", "error": "binary"}\n')
    (root / "old.failures.jsonl").write_text('{"path": "y.txt", "stage": "read", "error": "gone"}\n')  # output moved
    (root / "mine.failures.jsonl").write_text('{"what": "a user file named like one"}\n')
    (root / "qdrant_data" / "docs.gpucli").mkdir(parents=True)
    (root / "qdrant_data" / "docs.gpucli" / "ledger.sqlite").write_bytes(b"")
    (root / "qdrant_data" / "meta.json").write_text("{}")
    (root / "qdrant_data" / "docs.failures.jsonl").write_text("")


def test_another_gpucli_output_its_state_and_any_failures_file_are_not_inputs(tmp_path):
    _outputs_tree(tmp_path / "in")
    assert sorted(paths([tmp_path / "in"], WalkFilter((), include=("*",)))) == [
        "data.jsonl", "mine.failures.jsonl", "notes/a.txt"]


def test_an_output_named_as_a_root_is_read(tmp_path):
    _outputs_tree(tmp_path / "in")
    assert paths([tmp_path / "in" / "vectors.jsonl"], EMBED_LIKE) == ["vectors.jsonl"]
    assert paths([tmp_path / "in" / "sub" / "rows.parquet"]) == ["notes.txt"]
