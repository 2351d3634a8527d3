"""The compaction policy (gpucli/output/compaction.py) on plain data: which parts fold, and when."""

from __future__ import annotations

from gpucli.output.compaction import (
    AUTO_MIN_SMALL,
    SMALL_BYTES,
    TARGET_BYTES,
    Layout,
    PartSize,
    plan,
)

KIB = 1024


def parts(*sizes: int, columns: tuple[str, ...] = ("path",)) -> list[PartSize]:
    return [PartSize(f"part-{i:05d}.parquet", size, columns) for i, size in enumerate(sizes)]


def test_a_run_compacts_only_once_the_output_holds_the_auto_threshold_of_small_parts():
    assert not plan(parts(*[4 * KIB] * (AUTO_MIN_SMALL - 1)))
    folded = plan(parts(*[4 * KIB] * AUTO_MIN_SMALL))
    assert len(folded.bins) == 1 and len(folded.bins[0]) == AUTO_MIN_SMALL
    assert folded.removed == AUTO_MIN_SMALL - 1


def test_on_demand_any_two_small_parts_fold_and_one_alone_is_left():
    assert plan(parts(4 * KIB, 4 * KIB), min_small=2).bins == (("part-00000.parquet", "part-00001.parquet"),)
    assert not plan(parts(4 * KIB), min_small=2)


def test_parts_of_the_small_size_or_over_are_never_rewritten():
    big = SMALL_BYTES
    folded = plan(parts(big, 4 * KIB, big * 3, 4 * KIB, 4 * KIB), min_small=2)
    assert folded.bins == (("part-00001.parquet", "part-00003.parquet", "part-00004.parquet"),)
    assert folded.rewrite_bytes == 12 * KIB


def test_bins_stay_within_the_target_size_and_keep_part_order():
    size = SMALL_BYTES - 1
    count = 2 * (TARGET_BYTES // size) + 1
    folded = plan(parts(*[size] * count), min_small=2)
    assert all(len(group) * size <= TARGET_BYTES for group in folded.bins)
    assert [name for group in folded.bins for name in group] == sorted(name for group in folded.bins for name in group)
    assert len(folded.bins) == 2  # the last part is alone in a third bin: left as it is


def test_parts_with_other_columns_never_share_a_bin():
    old = parts(4 * KIB, 4 * KIB, columns=("path", "text"))
    new = [PartSize(f"part-{i:05d}.parquet", 4 * KIB, ("path", "text", "mtime")) for i in (2, 3)]
    assert plan(old + new, min_small=2).bins == (("part-00000.parquet", "part-00001.parquet"),
                                                  ("part-00002.parquet", "part-00003.parquet"))


def test_inspect_advises_compaction_only_when_it_would_remove_several_parts():
    assert "gpucli compact out.parquet" in Layout.of(parts(*[4 * KIB] * 13)).advice("out.parquet")
    assert "leaves 1" in Layout.of(parts(*[4 * KIB] * 13)).advice("out.parquet")
    assert Layout.of(parts(*[4 * KIB] * 3)).advice("out.parquet") == ""
    assert Layout.of(parts(*[SMALL_BYTES * 2] * 13)).advice("out.parquet") == ""
    layout = Layout.of(parts(1 * KIB, 2 * KIB, 9 * KIB))
    assert (layout.parts, layout.smallest, layout.median, layout.largest, layout.small) == (3, KIB, 2 * KIB, 9 * KIB, 3)
