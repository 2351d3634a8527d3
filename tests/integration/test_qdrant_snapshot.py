"""`export_snapshot` (gpucli/output/sinks/qdrant/edge/snapshot.py): a closed Qdrant Edge shard packed as a
Qdrant shard snapshot comes back whole through `EdgeShard.unpack_snapshot` + `EdgeShard.load` (the same
unpacking code a server runs: lib/shard/src/snapshots/snapshot_utils.rs), and its tar has the layout
of a shard snapshot a server writes (POST /collections/{name}/shards/0/snapshots), which is, in
qdrant/qdrant:

    segments/<uuid>.tar        one per segment (lib/collection/src/shards/local_shard/snapshot.rs,
                               snapshot_all_segments; lib/segment/src/segment/snapshot.rs, take_snapshot in
                               SnapshotFormat::Regular): a tar of snapshot/files/<file of the segment dir>,
                               segment.json and version.info last (the server takes the files its segment
                               lists; the export takes every file of the closed segment dir, journals too)
    newest_clocks.json         {"clocks":[...]}           (LocalShardClocks::archive_data_from)
    oldest_clocks.json
    wal/, wal/closed-<N>       an empty WAL: one closed WAL segment, an old-GNU sparse entry of the WAL
                               segment capacity, starting after the last operation (snapshot_empty_wal;
                               lib/wal/src/lib.rs, generate_empty_wal_starting_at_index)
    replica_state.json         {"is_local":true,"this_peer_id":P,"peers":{"P":"Active"}}
    shard_config.json          {"type":"ReplicaSet"}      (lib/collection/src/shards/replica_set/snapshots.rs)

GNU tar (tar-rs, sparse(true): lib/common/common/src/tar_ext.rs), whose unpacking accepts only directories,
regular files and GNU sparse files (lib/common/common/src/tar_unpack.rs). The server-made fixture
lib/storage/src/content_manager/snapshots/test-shard.snapshot holds wal/, wal/closed-255 ('S', 1 MiB,
data (0, 4096) then (1048576, 0), "wal\\0" + seed), newest_clocks.json, replica_state.json and
shard_config.json with exactly these JSON shapes. No server runs here: restoring on one is not tested.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
import uuid
from pathlib import Path

import pytest

from gpucli.core.errors import GpucliError, UsageError
from gpucli.output.sinks.qdrant.edge.snapshot import _file, _write_tar, export_snapshot

qe = pytest.importorskip("qdrant_edge")

POINTS = 300
BATCH = 100
SPARSE_QUERY = qe.SparseVector([3, 7, 11, 19], [0.9, 0.5, 0.7, 0.3])
DENSE_QUERY = [0.3, -0.1, 0.8, 0.2, 0.5, -0.4, 0.1, 0.6]
NEW_ID = "00000000-0000-4000-8000-000000000001"


def config():
    return qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=8, distance=qe.Distance.Cosine),
        sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1),  # 1 KB: optimize() builds the HNSW index
    )


def make_points(n: int, seed: int = 7) -> list:
    rnd = random.Random(seed)
    points = []
    for i in range(n):
        indices = sorted(rnd.sample(range(24), 4))
        vectors = {
            "": [rnd.uniform(-1, 1) for _ in range(8)],
            "bm25": qe.SparseVector(indices, [rnd.uniform(0.1, 1) for _ in indices]),
        }
        payload = {"path": f"docs/file-{i % 9}.pdf", "chunk": i, "text": f"chunk {i} of the corpus"}
        points.append(qe.Point(str(uuid.UUID(int=rnd.getrandbits(128), version=4)), vectors, payload))
    return points


def snapshot_of(shard) -> dict:
    """What must survive: points, payloads, vectors, the top 10 of both kinds of query, the payload index."""
    ids, offset = [], None
    while True:
        records, offset = shard.scroll(qe.ScrollRequest(limit=100, offset=offset))
        ids += [str(r.id) for r in records]
        if offset is None:
            break
    records = shard.retrieve(ids, with_payload=True, with_vector=True)
    dense = shard.query(qe.QueryRequest(limit=10, query=qe.Query.Nearest(DENSE_QUERY)))
    sparse = shard.query(qe.QueryRequest(limit=10, query=qe.Query.Nearest(SPARSE_QUERY, using="bm25")))
    info = shard.info()
    return {
        "count": info.points_count,
        "records": {
            str(r.id): (r.payload, r.vector[""], r.vector["bm25"].indices, r.vector["bm25"].values) for r in records
        },
        "dense": [(str(p.id), p.score) for p in dense],
        "sparse": [(str(p.id), p.score) for p in sparse],
        "schema": {key: (str(index.data_type), index.points) for key, index in info.payload_schema.items()},
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """A real shard (two segments after optimize: the indexed one and an empty appendable one), closed,
    then exported."""
    root = tmp_path_factory.mktemp("edge")
    shard_dir = root / "shard"
    shard = qe.EdgeShard.create(str(shard_dir), config())
    points = make_points(POINTS)
    updates = 0
    for start in range(0, POINTS, BATCH):
        shard.update(qe.UpdateOperation.upsert_points(points[start : start + BATCH]))
        updates += 1
    shard.update(qe.UpdateOperation.create_field_index("path", qe.PayloadSchemaType.Keyword))
    updates += 1
    shard.optimize()
    assert shard.info().indexed_vectors_count > 0
    before = snapshot_of(shard)
    shard.flush()
    shard.close()
    out = export_snapshot(shard_dir, root / "out" / "shard-0.snapshot")
    return {"shard_dir": shard_dir, "snapshot": out, "before": before, "updates": updates, "root": root}


def test_round_trip_through_unpack_snapshot_and_load(exported: dict) -> None:
    restored = exported["root"] / "restored"
    qe.EdgeShard.unpack_snapshot(str(exported["snapshot"]), str(restored))
    shard = qe.EdgeShard.load(str(restored))
    try:
        after = snapshot_of(shard)
        before = exported["before"]
        assert after["count"] == before["count"] == POINTS
        assert after["records"] == before["records"]
        assert after["dense"] == before["dense"] and len(after["dense"]) == 10
        assert after["sparse"] == before["sparse"] and len(after["sparse"]) == 10
        assert after["schema"] == before["schema"]
        assert "path" in after["schema"] and "Keyword" in after["schema"]["path"][0]
        assert shard.info().indexed_vectors_count > 0

        # Writes after the restore land: the WAL starts after the last operation. One that started
        # lower would give an update an operation number under the points' versions: skipped as old.
        some = next(iter(before["records"]))
        shard.update(qe.UpdateOperation.set_payload([some], {"path": "moved.pdf"}))
        new = qe.Point(NEW_ID, {"": [1.0] * 8, "bm25": qe.SparseVector([1], [1.0])}, {"path": "new.pdf"})
        shard.update(qe.UpdateOperation.upsert_points([new]))
        shard.flush()
    finally:
        shard.close()
    shard = qe.EdgeShard.load(str(restored))
    try:
        assert shard.info().points_count == POINTS + 1
        got = {str(r.id): r.payload for r in shard.retrieve([some, NEW_ID], with_payload=True, with_vector=False)}
        assert got[some]["path"] == "moved.pdf" and got[NEW_ID] == {"path": "new.pdf"}
    finally:
        shard.close()


def test_layout_is_a_server_shard_snapshot(exported: dict) -> None:
    shard_dir: Path = exported["shard_dir"]
    segment_dirs = sorted(p for p in (shard_dir / "segments").iterdir() if p.is_dir())
    assert len(segment_dirs) == 2
    snapshot: Path = exported["snapshot"]
    raw = snapshot.read_bytes()
    allowed = {tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.GNUTYPE_SPARSE}
    with tarfile.open(snapshot) as tar:
        members = tar.getmembers()
        wal = f"wal/closed-{exported['updates']}"  # operations 0..updates-1 were written: the WAL starts after
        assert [m.name for m in members] == [f"segments/{d.name}.tar" for d in segment_dirs] + [
            "newest_clocks.json",
            "oldest_clocks.json",
            "wal",
            wal,
            "replica_state.json",
            "shard_config.json",
        ]
        for member in members:
            assert member.type in allowed
            assert raw[member.offset + 257 : member.offset + 265] == b"ustar  \0"  # GNU, as tar-rs writes
        assert tar.getmember("wal").isdir()
        assert tar.extractfile("newest_clocks.json").read() == b'{"clocks":[]}'
        assert tar.extractfile("oldest_clocks.json").read() == b'{"clocks":[]}'
        assert tar.extractfile("shard_config.json").read() == b'{"type":"ReplicaSet"}'
        state = tar.extractfile("replica_state.json").read()
        assert state == b'{"is_local":true,"this_peer_id":0,"peers":{"0":"Active"}}'

        wal_member = tar.getmember(wal)
        edge_wal = max(p.stat().st_size for p in (shard_dir / "wal").glob("open-*"))
        assert wal_member.type == tarfile.GNUTYPE_SPARSE and wal_member.size == edge_wal
        wal_bytes = tar.extractfile(wal_member).read()
        assert wal_bytes[:4] == b"wal\0" and not any(wal_bytes[8:])  # header, then no entry

        for segment in segment_dirs:
            inner = tarfile.open(fileobj=io.BytesIO(tar.extractfile(f"segments/{segment.name}.tar").read()))
            names = [m.name for m in inner.getmembers()]
            files = {p.relative_to(segment).as_posix() for p in segment.rglob("*") if p.is_file()}
            assert all(name.startswith("snapshot/files/") for name in names)
            assert {name.removeprefix("snapshot/files/") for name in names} == files
            assert names[-2:] == ["snapshot/files/segment.json", "snapshot/files/version.info"]
            assert all(m.type in allowed for m in inner.getmembers())
            for member in inner.getmembers():
                source = segment / member.name.removeprefix("snapshot/files/")
                assert inner.extractfile(member).read() == source.read_bytes()

    # Qdrant preallocates its memory-mapped files: holes go in as sparse entries, not as zeros.
    apparent = sum(p.stat().st_size for p in shard_dir.rglob("*") if p.is_file())
    assert apparent > 100 * 2**20 and snapshot.stat().st_size < 5 * 2**20


def test_sparse_entries_with_many_regions_and_long_names(tmp_path: Path) -> None:
    """More than 4 data regions need GNU extension headers; a name over 100 bytes a GNU long name."""
    src = tmp_path / "sparse.dat"
    with open(src, "wb") as f:
        for i in range(40):
            f.seek(i * 65536)
            f.write(os.urandom(64))
        f.truncate(40 * 65536 + 777)
    name = "snapshot/files/payload_index/" + "x" * 90 + "/page_0.dat"
    with open(tmp_path / "t.tar", "wb") as out:
        _write_tar(out, [_file(src, name)])
    with tarfile.open(tmp_path / "t.tar") as tar:
        (member,) = tar.getmembers()
        assert member.name == name and member.size == src.stat().st_size
        if member.issparse():  # a file system without holes gives a plain entry
            assert len(member.sparse) > 4
        assert tar.extractfile(member).read() == src.read_bytes()


def test_refuses_what_is_not_an_edge_shard(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    with pytest.raises(UsageError, match="not a Qdrant Edge shard") as err:
        export_snapshot(tmp_path / "plain", tmp_path / "out.snapshot")
    assert isinstance(err.value, GpucliError)
    with pytest.raises(UsageError, match="not a Qdrant Edge shard"):
        export_snapshot(tmp_path / "missing", tmp_path / "out.snapshot")
    server_like = tmp_path / "server-shard"  # a server's shard directory: no edge_config.json
    (server_like / "wal").mkdir(parents=True)
    (server_like / "segments").mkdir()
    with pytest.raises(UsageError, match="not a Qdrant Edge shard"):
        export_snapshot(server_like, tmp_path / "out.snapshot")
    assert not (tmp_path / "out.snapshot").exists()


def test_refuses_an_open_shard(tmp_path: Path) -> None:
    shard_dir = tmp_path / "open"
    shard = qe.EdgeShard.create(str(shard_dir), config())
    try:
        shard.update(qe.UpdateOperation.upsert_points(make_points(3)))
        shard.flush()
        with pytest.raises(UsageError, match="is open"):
            export_snapshot(shard_dir, tmp_path / "out.snapshot")
        assert not (tmp_path / "out.snapshot").exists()
    finally:
        shard.close()
    assert export_snapshot(shard_dir, tmp_path / "out.snapshot").is_file()
