"""The object-store policies without a server: URLs, redaction, error kinds, retries, and the
ledger's decision for an object (gpucli/stores)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from gpucli.core.decision import Action, Known, Status, decide
from gpucli.core.errors import UsageError
from gpucli.core.records import Source
from gpucli.inputs.stores import retry
from gpucli.inputs.stores.retry import ErrorKind, GaveUp, RetryPolicy, classify, reason, retrying
from gpucli.inputs.stores.url import StoreUrl, common_root, is_url, redact, relative


class ClientError(Exception):
    """botocore's shape: `response` with the store's code and status."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(f"An error occurred ({code})")
        self.response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}


class ClientPayloadError(Exception):
    """aiohttp's name for a body cut short (a reset mid-object)."""


def test_urls_are_told_from_local_paths_without_fsspec():
    assert is_url("s3://b/p") and is_url("gs://b") and is_url("abfs://c/p")
    assert not is_url("/data/s3://odd") and not is_url("docs") and not is_url("./a://b")
    out = subprocess.run([sys.executable, "-c", "import gpucli.inputs.walk, gpucli.engines.reader, sys; "
                          "print('fsspec' in sys.modules, 'gpucli.inputs.stores.listing' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], "the local path imports no fsspec"


def test_a_url_root_parses_and_refuses_credentials_and_unknown_protocols():
    assert StoreUrl.parse("s3://bkt/a/b/") == StoreUrl("s3", "bkt", "a/b")
    assert StoreUrl.parse("s3://bkt") == StoreUrl("s3", "bkt", "")
    assert str(StoreUrl.parse("gs://bkt//x/./y")) == "gs://bkt/x/y"
    with pytest.raises(UsageError, match="credentials in a URL are refused") as err:
        StoreUrl.parse("s3://AKIA:hunter2secret@bkt/p")
    assert "hunter2secret" not in str(err.value)
    with pytest.raises(UsageError, match="no query"):
        StoreUrl.parse("az://c/p?sig=abcdefgh")
    with pytest.raises(UsageError, match="not ftp://"):
        StoreUrl.parse("ftp://host/p")


def test_rows_are_relative_to_the_deepest_common_prefix_in_one_bucket():
    base = common_root([StoreUrl.parse("s3://b/data/2024/x"), StoreUrl.parse("s3://b/data/2025")])
    assert base == StoreUrl("s3", "b", "data") and relative("data/2024/x/f.txt", base) == "2024/x/f.txt"
    assert relative("f.txt", StoreUrl("s3", "b", "")) == "f.txt"
    with pytest.raises(UsageError, match="one bucket"):
        common_root([StoreUrl.parse("s3://a/p"), StoreUrl.parse("s3://b/p")])


def test_redaction_removes_user_info_signed_queries_and_secret_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    text = redact("s3://u:p@b/k https://acct.blob/c?sv=1&sig=XYZ boto said wJalrXUtnFEMI/K7MDENG")
    assert "u:p" not in text and "XYZ" not in text and "wJalrXUtnFEMI" not in text
    assert redact("https://h/p?versionId=3") == "https://h/p?versionId=3"


@pytest.mark.parametrize(("exc", "kind"), [
    (ClientError("SlowDown", 503), ErrorKind.TRANSIENT),
    (ClientError("TooManyRequests", 429), ErrorKind.TRANSIENT),
    (ClientError("InternalError", 500), ErrorKind.TRANSIENT),
    (ClientPayloadError("Response payload is not completed"), ErrorKind.TRANSIENT),
    (TimeoutError(), ErrorKind.TRANSIENT),
    (ConnectionResetError(104, "reset"), ErrorKind.TRANSIENT),
    (ClientError("NoSuchKey", 404), ErrorKind.MISSING),
    (FileNotFoundError("k"), ErrorKind.MISSING),
    (ClientError("AccessDenied", 403), ErrorKind.DENIED),
    (PermissionError("k"), ErrorKind.DENIED),
    (ValueError("odd"), ErrorKind.OTHER),
])
def test_errors_are_classified_by_code_status_and_type(exc, kind):
    assert classify(exc) is kind


def test_a_translated_error_is_classified_by_its_cause():
    try:
        try:
            raise ClientError("SlowDown", 503)
        except ClientError as inner:
            raise OSError("s3fs's translation") from inner
    except OSError as outer:
        assert classify(outer) is ErrorKind.TRANSIENT


def test_transient_errors_are_retried_a_bounded_number_of_times_and_others_never(monkeypatch):
    policy = RetryPolicy(attempts=3, base_s=0.001, cap_s=0.002)
    calls: list[int] = []

    def failing(errors):
        async def call():
            calls.append(1)
            if errors:
                raise errors.pop(0)
            return b"data"
        return call

    assert asyncio.run(retrying(failing([ClientError("SlowDown", 503)] * 2), policy)) == b"data" and len(calls) == 3
    calls.clear()
    with pytest.raises(GaveUp) as err:
        asyncio.run(retrying(failing([ClientError("SlowDown", 503)] * 5), policy))
    assert len(calls) == 3 and "after 3 attempts: SlowDown (503)" in str(err.value)
    calls.clear()
    with pytest.raises(FileNotFoundError):
        asyncio.run(retrying(failing([FileNotFoundError("k")]), policy))
    assert len(calls) == 1


def test_the_pause_grows_is_capped_and_jittered():
    policy = RetryPolicy(attempts=8, base_s=0.2, cap_s=5.0)
    assert all(0.1 <= policy.delay(0) <= 0.2 for _ in range(50))
    assert all(2.5 <= policy.delay(6) <= 5.0 for _ in range(50))
    assert len({policy.delay(2) for _ in range(20)}) > 1
    assert retry.POLICY.attempts >= 3


def test_reasons_say_what_happened_and_what_to_do():
    assert "gone" in reason(ClientError("NoSuchKey", 404)) and "a rerun no longer lists it" in reason(
        FileNotFoundError())
    assert reason(ClientError("AccessDenied", 403), "list").startswith("access denied (AccessDenied (403))")
    assert reason(ClientError("NoSuchBucket", 404), "list").startswith("no such bucket (NoSuchBucket (404))")
    assert "a rerun tries again" in reason(GaveUp(ClientError("SlowDown", 503), 6))


def test_an_object_is_unchanged_only_with_the_same_size_mtime_and_etag():
    known = Known(5, 10**18, "digest", Status.DONE, '"etag1"')
    same = Source(0, "a.txt", "s3://b/a.txt", 5, 10**18, version='"etag1"')
    rewritten = Source(0, "a.txt", "s3://b/a.txt", 5, 10**18, version='"etag2"')  # within the same second
    assert decide(known, same).action is Action.UNCHANGED and "ETag" in decide(known, same).reason
    assert decide(known, rewritten).action is Action.RUN and decide(known, rewritten).done_digest == "digest"
    file_known = Known(5, 7, "d", Status.DONE)
    assert decide(file_known, Source(0, "a.txt", "/x/a.txt", 5, 7)).action is Action.UNCHANGED, "files as before"


def test_a_ledger_from_before_buckets_gets_the_version_column_and_keeps_its_decisions(tmp_path):
    import sqlite3

    from gpucli.output.ledger import Ledger

    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    db.execute("create table files (path text primary key, size integer, mtime_ns integer, digest text, "
               "status text, error text, location text, rows integer, updated real)")
    db.execute("insert into files values ('a.txt', 5, 7, 'd', 'done', '', 'part-00000.parquet', 1, 1.0)")
    db.commit()
    db.close()
    ledger = Ledger(tmp_path)
    try:
        known = ledger.lookup(["a.txt"])["a.txt"]
        assert known.version == "" and decide(known, Source(0, "a.txt", "/x/a.txt", 5, 7)).action is Action.UNCHANGED
        obj = Source(1, "b.txt", "s3://b/b.txt", 3, 9, digest="e", version='"v1"')
        ledger.mark_done([obj], [1], "part-00001.parquet")
        assert ledger.lookup(["b.txt"])["b.txt"].version == '"v1"'
        obj.version = '"v2"'
        ledger.mark_unchanged([obj])  # the same content under a new ETag: the next run skips it unread
        assert ledger.lookup(["b.txt"])["b.txt"].version == '"v2"'
    finally:
        ledger.close()


class PagedStore:
    """A stand-in for s3fs: ListObjectsV2 pages of `page` keys, `keys` in all, made on the fly."""

    def __init__(self, keys: int, page: int = 1000) -> None:
        from fsspec.asyn import get_loop

        self.loop, self.keys, self.page, self.calls = get_loop(), keys, page, 0

    async def _call_s3(self, method: str, **kw):
        assert method == "list_objects_v2" and kw["Delimiter"] == "/"
        self.calls += 1
        start = int(kw.get("ContinuationToken") or 0)
        end = min(start + self.page, self.keys)
        contents = [{"Key": f"k/{i:07d}.txt", "Size": 10, "LastModified": None, "ETag": f'"{i}"'}
                    for i in range(start, end)]
        return {"Contents": contents, "IsTruncated": end < self.keys, "NextContinuationToken": str(end)}


def test_a_listing_of_many_keys_holds_a_page_not_the_prefix(monkeypatch):
    """100,000 keys in one prefix (a million took 35 s under tracemalloc): the peak is a page's,
    whatever the count."""
    pytest.importorskip("fsspec")
    import tracemalloc

    from gpucli.inputs.scope import WalkFilter, WalkReport
    from gpucli.inputs.stores import filesystems, listing

    store = PagedStore(100_000)
    monkeypatch.setattr(filesystems, "filesystem", lambda protocol: store)
    monkeypatch.setattr(listing, "object_info", lambda fs, url: None)
    report = WalkReport()
    tracemalloc.start()
    try:
        count = sum(len(block) for block in listing.list_blocks(["s3://bkt/k"], WalkFilter((".txt",)), report))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 100_000 and store.calls == 100 and report.complete
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB: 100,000 Sources held would be ~30 MiB"
