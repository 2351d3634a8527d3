"""Export a closed Qdrant Edge shard as a Qdrant *shard snapshot*: the tar a server writes at
`POST /collections/{name}/shards/0/snapshots` and restores at `POST .../shards/0/snapshots/upload`
or `PUT .../shards/0/snapshots/recover` (openapi/openapi-shard-snapshots.ytt.yaml), and that
`EdgeShard.unpack_snapshot` reads.

Members, from qdrant/qdrant (master; the same in the edge 0.9.0 branch):
    segments/<uuid>.tar     a segment, SnapshotFormat::Regular: a tar of snapshot/files/<path in the segment
                            dir>, segment.json and version.info last (take_snapshot, snapshot_files: lib/segment/
                            src/segment/snapshot.rs; unpacked by restore_snapshot_in_place, segment_ops.rs there)
    newest_clocks.json,     {"clocks":[]}: an Edge shard has no replication clocks
    oldest_clocks.json      (LocalShardClocks::archive_data_from, lib/collection/src/shards/local_shard/mod.rs)
    wal/, wal/closed-<N>    an empty WAL that starts after the last operation, as in an API shard snapshot
                            (snapshot_empty_wal, lib/collection/src/shards/local_shard/snapshot.rs;
                            Wal::generate_empty_wal_starting_at_index, lib/wal/src/lib.rs; segment header
                            "wal", version 0, CRC seed: lib/wal/src/segment.rs). Edge's own WAL stays behind.
    replica_state.json      {"is_local":true,...}: a single-node server refuses a shard without local data
    shard_config.json       {"type":"ReplicaSet"} (lib/collection/src/shards/replica_set/snapshots.rs)
GNU tar as tar-rs writes it with sparse(true) (lib/common/common/src/tar_ext.rs): files with holes (Qdrant
preallocates its memory-mapped files) are old-GNU sparse entries, so the snapshot holds data, not holes;
the server unpacks only directories, regular files and GNU sparse entries (lib/common/common/src/
tar_unpack.rs). edge_config.json is left out: a server has its collection's config, Edge derives it from
the segments. Matches the server-made lib/storage/src/content_manager/snapshots/test-shard.snapshot.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO

from gpucli.core.durable import replacing
from gpucli.core.errors import UsageError

BLOCK = 512
GNU = tarfile.GNU_FORMAT
Regions = tuple[tuple[int, int], ...]  # (offset, length) of a file's data
UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


class _Member:
    """One tar member: its header block(s), then bytes, regions of a file, or a nested tar."""

    def __init__(self, header: bytes, data: bytes | Path | list[_Member] = b"", regions: Regions = (), size: int = 0):
        self.header, self.data, self.regions, self.size = header, data, regions, size

    def write(self, out: BinaryIO) -> None:
        out.write(self.header)
        if isinstance(self.data, bytes):
            out.write(self.data)
        elif isinstance(self.data, list):
            _write_tar(out, self.data)
        else:
            with open(self.data, "rb") as src:
                for offset, count in self.regions:
                    src.seek(offset)
                    while count:
                        chunk = src.read(min(count, 1 << 20))
                        if not chunk:
                            raise OSError(errno.EIO, f"{self.data} changed while it was exported")
                        out.write(chunk)
                        count -= len(chunk)
        out.write(bytes(-self.size % BLOCK))


def _write_tar(out: BinaryIO, members: list[_Member]) -> None:
    for member in members:
        member.write(out)
    out.write(bytes(2 * BLOCK))  # end of archive, as tar::Builder::finish writes it


def _header(name: str, size: int, mode: int = 0o644, kind: bytes = tarfile.REGTYPE, mtime: int = 0) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.mtime = size, mode, kind, mtime
    return info.tobuf(GNU, "utf-8", "surrogateescape")


def _data(name: str, data: bytes) -> _Member:
    return _Member(_header(name, len(data)), data, size=len(data))


def _file(path: Path, name: str) -> _Member:
    """A file; one with holes as an old-GNU sparse entry, as tar-rs writes it (prepare_header_sparse)."""
    st = path.stat()
    mode, mtime, regions = st.st_mode & 0o7777, int(st.st_mtime), _regions(path, st.st_size)
    if regions is None:
        return _Member(_header(name, st.st_size, mode, mtime=mtime), path, ((0, st.st_size),), st.st_size)
    on_disk = sum(count for _, count in regions)
    blocks = bytearray(_header(name, on_disk, mode, tarfile.GNUTYPE_SPARSE, mtime))
    head = len(blocks) - BLOCK  # after any GNU long-name blocks
    fields = [tarfile.itn(n, 12, GNU) for region in regions for n in region]
    blocks[head + 386 : head + 386 + 12 * len(fields[:8])] = b"".join(fields[:8])  # 4 (offset, length)
    blocks[head + 482 : head + 495] = bytes([len(fields) > 8]) + tarfile.itn(st.st_size, 12, GNU)
    blocks[head + 148 : head + 156] = b" " * 8
    blocks[head + 148 : head + 155] = b"%06o\0" % sum(blocks[head : head + BLOCK])
    for i in range(8, len(fields), 42):  # extension blocks: 21 more pairs, byte 504 says another follows
        ext = b"".join(fields[i : i + 42])
        blocks += ext + bytes(504 - len(ext)) + bytes([len(fields) > i + 42]) + bytes(7)
    return _Member(bytes(blocks), path, tuple(r for r in regions if r[1]), on_disk)


def _regions(path: Path, size: int) -> list[tuple[int, int]] | None:
    """Data regions of a file with holes, then (size, 0) as GNU tar and tar-rs write it; None if dense."""
    if size == 0 or not hasattr(os, "SEEK_HOLE"):
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        regions: list[tuple[int, int]] = []
        offset = 0
        while offset < size:
            try:
                offset = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as err:
                if err.errno == errno.ENXIO:
                    break  # only a hole is left
                raise
            end = os.lseek(fd, offset, os.SEEK_HOLE)
            regions.append((offset, end - offset))
            offset = end
        return None if regions == [(0, size)] else regions + [(size, 0)]
    except OSError:
        return None  # no SEEK_DATA on this file system: the file goes in whole
    finally:
        os.close(fd)


def _segment(segment: Path) -> _Member:
    """segments/<uuid>.tar: every file of the segment dir (the server's list of files, plus e.g. journals) under
    snapshot/files/, segment.json and version.info last; no segment_manifest.json, which a full recovery refuses."""
    files = sorted(p.relative_to(segment).as_posix() for p in segment.rglob("*") if p.is_file())
    files.sort(key=lambda rel: rel in ("segment.json", "version.info"))  # stable: the rest stays sorted
    members = [_file(segment / rel, "snapshot/files/" + rel) for rel in files if rel != "segment_manifest.json"]
    size = sum(len(m.header) + m.size + (-m.size % BLOCK) for m in members) + 2 * BLOCK
    return _Member(_header(f"segments/{segment.name}.tar", size), members, size=size)


def _segment_dirs(segments: Path) -> list[Path]:
    """The complete segments, as Edge loads them: UUID-named directories (not hidden, not `.deleted`
    leftovers) with a version.info."""
    return [d for d in sorted(segments.iterdir()) if UUID.fullmatch(d.name) and (d / "version.info").is_file()]


def _empty_wal(shard: Path, segments: list[Path], tmp: Path) -> Path:
    """wal/closed-<N>, N after the newest segment version (or acknowledged WAL index): the server starts
    its WAL after its last operation; one that started lower would have later writes skipped as old."""
    last = [json.loads((s / "segment.json").read_text()).get("version") or 0 for s in segments]
    if (shard / "wal" / "first-index").is_file():
        last.append(int(json.loads((shard / "wal" / "first-index").read_text()).get("ack_index", 0)))
    sizes = [p.stat().st_size for p in (shard / "wal").iterdir() if p.name.split("-")[0] in ("open", "closed")]
    wal = tmp / f"closed-{max(last, default=0) + 1}"
    with open(wal, "wb") as f:
        f.write(b"wal\0" + os.urandom(4))  # magic, format version 0, random CRC seed; no entries
        f.truncate((max(sizes, default=0) or 32 << 20) & ~7)  # capacity: Edge's, else a server's default
    return wal


def export_snapshot(shard_dir: str | Path, out_file: str | Path) -> Path:
    """Write the closed Edge shard at `shard_dir` to `out_file` as a Qdrant shard snapshot.

    Why: an Edge shard's segments are a server's segments, but a server restores a shard only from its
    own snapshot layout (segment tars, clocks, a WAL, replica state); this writes that layout, so a
    collection of `qdrant:PATH/COLLECTION` moves to a server with `POST .../shards/0/snapshots/upload`.
    The shard must be closed: Qdrant locks (flock) its WAL directory while it is open, and this export
    holds that lock, so the shard cannot be opened halfway. Refuses anything else (UsageError).
    """
    shard, out = Path(shard_dir), Path(out_file)
    if not ((shard / "wal").is_dir() and (shard / "segments").is_dir() and (shard / "edge_config.json").is_file()):
        raise UsageError(f"{shard}: not a Qdrant Edge shard (it needs wal/, segments/ and edge_config.json)")
    segments = _segment_dirs(shard / "segments")
    if not segments:
        raise UsageError(f"{shard}: a Qdrant Edge shard without segments, nothing to export")
    lock = os.open(shard / "wal", os.O_RDONLY)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{shard}: the shard is open (its WAL is locked); close it, then export") from None
        with tempfile.TemporaryDirectory(prefix="gpucli-wal-") as tmp:
            clocks, wal = b'{"clocks":[]}', _empty_wal(shard, segments, Path(tmp))
            members = [_segment(s) for s in segments] + [_data("newest_clocks.json", clocks)]
            members += [_data("oldest_clocks.json", clocks), _Member(_header("wal", 0, 0o755, tarfile.DIRTYPE))]
            members += [_file(wal, f"wal/{wal.name}")]
            members += [_data("replica_state.json", b'{"is_local":true,"this_peer_id":0,"peers":{"0":"Active"}}')]
            members += [_data("shard_config.json", b'{"type":"ReplicaSet"}')]
            out.parent.mkdir(parents=True, exist_ok=True)
            with replacing(out, out.with_name(out.name + ".partial")) as f:  # core/durable.py
                _write_tar(f, members)
    finally:
        os.close(lock)
    return out
