"""Which entries of a walked directory are gpucli's own outputs (gpucli/inputs/own_outputs.py): they are
not inputs, in the layout gpucli writes now and in the one earlier versions wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpucli.inputs.own_outputs import is_output_dir, outputs_among


def entries(directory: Path) -> list[os.DirEntry]:
    with os.scandir(directory) as it:
        return list(it)


def make_ledger(state: Path) -> None:
    state.mkdir(parents=True)
    (state / "ledger.sqlite").write_bytes(b"SQLite format 3\x00")


def test_a_parquet_output_with_its_state_beside_it_and_its_failures_file_are_not_inputs(tmp_path):
    (tmp_path / "embed.parquet").mkdir()
    make_ledger(tmp_path / "embed.parquet.gpucli")
    (tmp_path / "embed.failures.jsonl").write_text("")
    (tmp_path / "notes.parquet").mkdir()  # a dataset gpucli did not write: no ledger anywhere
    (tmp_path / "a.txt").write_text("text")
    assert outputs_among(entries(tmp_path)) == {"embed.parquet", "embed.parquet.gpucli", "embed.failures.jsonl"}


def test_the_earlier_layout_with_the_state_inside_the_dataset_is_still_known(tmp_path):
    make_ledger(tmp_path / "old.parquet" / "_gpucli")
    assert outputs_among(entries(tmp_path)) == {"old.parquet", "old.failures.jsonl"}
    assert is_output_dir(entries(tmp_path / "old.parquet"))


def test_a_failures_file_counts_only_when_it_holds_gpucli_s_records(tmp_path):
    (tmp_path / "mine.failures.jsonl").write_text(json.dumps({"path": "a", "stage": "read", "error": "x"}) + "\n")
    (tmp_path / "theirs.failures.jsonl").write_text(json.dumps({"ticket": 7}) + "\n")
    assert outputs_among(entries(tmp_path)) == {"mine.failures.jsonl"}


def test_a_state_directory_without_its_output_or_a_ledger_is_an_ordinary_directory(tmp_path):
    make_ledger(tmp_path / "gone.jsonl.gpucli")  # its output was removed
    (tmp_path / "x.jsonl").write_text("{}\n")
    (tmp_path / "x.jsonl.gpucli").mkdir()  # no ledger in it
    assert outputs_among(entries(tmp_path)) == set()
