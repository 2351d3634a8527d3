"""Trees in object storage (issue 31): `gpucli embed s3://bucket/prefix` against a real S3 API
on 127.0.0.1 (moto in server mode, tests/s3_server.py), through a proxy that counts the requests
and injects the faults a store really gives: throttling, a reset mid-object, an object deleted
after the listing, access denied on one prefix, a listing that fails part-way.

One server for the module; each test has a bucket of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from gpucli.app.cli import app
from gpucli.core.errors import RunFailedError
from gpucli.inputs.stores import retry, roots
from tests.helpers import SAMPLE, read_rows, refusal, run_fake, run_with
from tests.s3_server import SECRET, S3Server, use_server

TEXTS = {"a.txt": "alpha beta gamma\nsecond line here\n", "b.txt": "one two three four\n",
         "sub/c.txt": "deep in a prefix\n", "sub/d.txt": "another one\nand more words\n",
         "sub/deeper/e.txt": "the deepest file\n", "notes.md": "not read by the fake task\n",
         ".hidden.txt": "passed over, as a dot-file is on disk\n"}


@pytest.fixture(scope="module")
def s3():
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    server = S3Server()
    use_server(server)
    yield server
    server.stop()
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    os.environ.update(saved)


@pytest.fixture
def bucket(s3, request):
    """A bucket of this test's own holding TEXTS under `tree/`, and no faults."""
    name = request.node.name.replace("_", "-")[:50].strip("-").lower()
    s3.put_tree(name, TEXTS, prefix="tree/")
    s3.clear_faults()
    s3.traffic.reset()
    yield name
    s3.clear_faults()


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(attempts=4, base_s=0.02, cap_s=0.1))


def rows(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["path"], r["chunk"]): r for r in read_rows(out)}


def failures(summary) -> list[dict]:
    return sorted((json.loads(line) for line in Path(summary.failures_file).read_text().splitlines()),
                  key=lambda f: f["path"])


def test_a_bucket_gives_the_rows_of_the_same_tree_on_local_disk(s3, tmp_path, request):
    """The default model over a tree of texts, documents and images: the same rows (vectors
    allclose), failures and counts from the bucket as from the disk; the summary and the plain
    log on a real CLI run carry no credential."""
    local = tmp_path / "tree"
    for part in ("food", "formats"):
        shutil.copytree(SAMPLE / "docs" / part, local / part)
    shutil.copytree(SAMPLE / "images", local / "images")
    (local / "empty.txt").write_bytes(b"")
    s3.put_tree("same-rows", {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*")
                              if p.is_file()}, prefix="tree/")
    from_disk = run_with("local", "embed", [local], tmp_path / "disk.parquet")
    result = CliRunner().invoke(app, ["embed", "s3://same-rows/tree", "--out", str(tmp_path / "s3.parquet"),
                                      "--devices", "cpu", "--json", "--progress", "plain"])
    summary = json.loads(result.stdout)
    assert result.exit_code == from_disk.exit_code == 1, result.output  # empty.txt
    for key in ("inputs", "succeeded", "failed", "skipped", "rows"):
        assert summary[key] == getattr(from_disk, key), key
    assert Path(summary["failures_file"]).read_text() == Path(from_disk.failures_file).read_text()
    want, got = rows(tmp_path / "disk.parquet"), rows(tmp_path / "s3.parquet")
    assert got.keys() == want.keys() and ("formats/solar_system.pdf", 0) in got
    mtime = {o["Key"]: o["LastModified"] for o in s3.client().list_objects_v2(Bucket="same-rows")["Contents"]}
    for key, row in got.items():
        assert {k: v for k, v in row.items() if k not in ("embedding", "mtime")} == \
            {k: v for k, v in want[key].items() if k not in ("embedding", "mtime")}
        assert max(abs(a - b) for a, b in zip(row["embedding"], want[key]["embedding"], strict=True)) < 1e-5
        assert row["mtime"] == mtime[f"tree/{key[0]}"], "mtime: the store's last-modified time"
    metadata = pq.read_schema(next((tmp_path / "s3.parquet").glob("part-*.parquet"))).metadata
    assert metadata[b"gpucli.root"] == b"s3://same-rows/tree"
    assert SECRET not in result.stdout and SECRET not in result.stderr


def test_an_unchanged_rerun_reads_no_object_a_changed_one_alone_and_a_deleted_one_is_pruned(s3, bucket, tmp_path):
    out = tmp_path / "out.parquet"
    first = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert (first.exit_code, first.succeeded, first.failed) == (0, 5, 0)
    assert {p for p, _ in rows(out)} == {"a.txt", "b.txt", "sub/c.txt", "sub/d.txt", "sub/deeper/e.txt"}
    assert s3.traffic.object_gets == 5 and ".hidden.txt" not in str(s3.traffic.gets)

    s3.traffic.reset()
    again = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert (again.exit_code, again.unchanged, again.rows) == (0, 5, 0)
    assert s3.traffic.object_gets == 0, s3.traffic.gets

    client = s3.client()
    client.put_object(Bucket=bucket, Key="tree/b.txt", Body=b"five six seven\n")  # same size, new ETag
    client.delete_object(Bucket=bucket, Key="tree/sub/c.txt")
    s3.traffic.reset()
    third = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert dict(s3.traffic.gets) == {"tree/b.txt": 1}
    assert (third.exit_code, third.succeeded, third.unchanged, third.pruned) == (0, 1, 3, 1)
    assert {p for p, _ in rows(out)} == {"a.txt", "b.txt", "sub/d.txt", "sub/deeper/e.txt"}
    assert rows(out)[("b.txt", 0)]["text"] == "five six seven"


def test_reader_processes_read_the_objects_and_skip_the_unchanged_ones_too(s3, bucket, tmp_path):
    out = tmp_path / "out.parquet"
    first = run_fake([f"s3://{bucket}/tree"], out, read_processes=1)
    assert (first.exit_code, first.succeeded, s3.traffic.object_gets) == (0, 5, 5)
    s3.traffic.reset()
    again = run_fake([f"s3://{bucket}/tree"], out, read_processes=1)
    assert (again.exit_code, again.unchanged, s3.traffic.object_gets) == (0, 5, 0), "the ETag reaches the reader"


def test_a_listing_that_fails_part_way_prunes_nothing_under_it(s3, bucket, tmp_path, quick_retries):
    out = tmp_path / "out.parquet"
    assert run_fake([f"s3://{bucket}/tree"], out, prune=True).exit_code == 0
    s3.client().delete_object(Bucket=bucket, Key="tree/sub/d.txt")
    s3.faults.failing_list_prefixes = ("tree/sub/",)  # the store fails on this prefix, retries or not
    summary = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert summary.pruned == 0 and summary.exit_code == 1
    assert [(f["path"], f["stage"]) for f in failures(summary)] == [("sub", "read")]
    assert "cannot list s3://" in failures(summary)[0]["error"] and "InternalError (500)" in failures(summary)[0]["error"]
    assert {p for p, _ in rows(out)} >= {"sub/d.txt", "sub/deeper/e.txt"}, "nothing under the prefix is pruned"
    s3.clear_faults()
    healed = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert healed.pruned == 1 and "sub/d.txt" not in {p for p, _ in rows(out)}


def test_a_listing_that_fails_on_a_later_page_prunes_nothing_under_its_prefix(s3, bucket, tmp_path, quick_retries,
                                                                             monkeypatch):
    from gpucli.inputs.stores import listing

    out = tmp_path / "out.parquet"
    assert run_fake([f"s3://{bucket}/tree"], out, prune=True).exit_code == 0
    s3.client().delete_object(Bucket=bucket, Key="tree/a.txt")
    monkeypatch.setattr(listing, "PAGE_KEYS", 1)  # tree/ now lists in pages: b.txt, notes.md, sub/ ...
    s3.faults.failing_next_pages = True
    summary = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert summary.pruned == 0 and [f["path"] for f in failures(summary)] == ["."]
    assert "a.txt" in {p for p, _ in rows(out)}, "the root's listing broke off: a.txt may still be there"


def test_a_dry_run_on_a_bucket_reads_no_object(s3, bucket, tmp_path, capsys):
    from gpucli.core.config import RunConfig
    from gpucli.engines.dryrun import dry_run
    from tests.fake_task import FAKE

    out = tmp_path / "out.parquet"
    run_fake([f"s3://{bucket}/tree"], out)
    s3.client().put_object(Bucket=bucket, Key="tree/new.txt", Body=b"new words\n")
    s3.traffic.reset()
    capsys.readouterr()
    summary = dry_run(RunConfig(task=FAKE, paths=(f"s3://{bucket}/tree",), out=str(out), progress="off"))
    assert summary.exit_code == 0
    actions = {line["path"]: line["action"] for line in map(json.loads, capsys.readouterr().out.splitlines())}
    assert actions == {"a.txt": "unchanged", "b.txt": "unchanged", "new.txt": "run", "sub/c.txt": "unchanged",
                       "sub/d.txt": "unchanged", "sub/deeper/e.txt": "unchanged"}
    assert s3.traffic.object_gets == 0


def test_throttling_and_a_connection_reset_mid_object_are_retried_and_survived(s3, bucket, tmp_path, quick_retries):
    s3.faults.slowdown = {"tree/a.txt": 2, "tree/sub/c.txt": 3}
    s3.faults.reset = {"tree/b.txt": 1}
    out = tmp_path / "out.parquet"
    summary = run_fake([f"s3://{bucket}/tree"], out)
    assert (summary.exit_code, summary.succeeded, summary.failed) == (0, 5, 0), failures(summary)
    assert s3.traffic.gets["tree/a.txt"] == 3 and s3.traffic.gets["tree/sub/c.txt"] == 4
    assert s3.traffic.gets["tree/b.txt"] == 2
    assert rows(out)[("b.txt", 0)]["text"] == "one two three four", "the whole object, not the half before the reset"


def test_a_store_that_keeps_throttling_is_a_failure_record_after_bounded_retries(s3, bucket, tmp_path, quick_retries):
    s3.faults.slowdown = {"tree/a.txt": 99}
    summary = run_fake([f"s3://{bucket}/tree"], tmp_path / "out.parquet")
    assert s3.traffic.gets["tree/a.txt"] == 4, "retry.POLICY's attempts, no more"
    assert summary.exit_code == 1 and [f["path"] for f in failures(summary)] == ["a.txt"]
    assert "kept failing (after 4 attempts: SlowDown (503))" in failures(summary)[0]["error"]


def test_a_denied_prefix_and_an_object_gone_after_the_listing_are_failure_records_and_never_done(
        s3, bucket, tmp_path, quick_retries):
    out = tmp_path / "out.parquet"
    s3.faults.denied_prefixes = ("tree/sub/deeper",)
    s3.faults.gone = ("tree/b.txt",)
    summary = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert summary.exit_code == 1 and summary.succeeded == 3
    found = {f["path"]: f for f in failures(summary)}
    assert set(found) == {"b.txt", "sub/deeper"}
    assert "the object is gone" in found["b.txt"]["error"] and found["b.txt"]["stage"] == "read"
    assert "access denied (AccessDenied (403))" in found["sub/deeper"]["error"]
    assert s3.traffic.gets["tree/b.txt"] == 1, "a missing object is not retried"
    s3.clear_faults()
    s3.traffic.reset()
    rerun = run_fake([f"s3://{bucket}/tree"], out, prune=True)
    assert (rerun.exit_code, rerun.succeeded, rerun.unchanged) == (0, 2, 3)
    assert dict(s3.traffic.gets) == {"tree/b.txt": 1, "tree/sub/deeper/e.txt": 1}, "only what was not read before"


def test_credentials_are_never_printed_nor_taken_from_a_url(s3, bucket, tmp_path, monkeypatch, quick_retries):
    """The summary, the log, the failures file and a forced error (a store that cannot be reached,
    with GPUCLI_DEBUG's traceback) hold no secret; a URL with credentials in it is refused
    without repeating them."""
    runner = CliRunner()
    refused = runner.invoke(app, ["embed", f"s3://AKIA:{SECRET}@{bucket}/tree", "--out", str(tmp_path / "x.parquet")])
    assert refused.exit_code == 2 and "credentials in a URL are refused" in refused.stderr
    assert SECRET not in refused.output
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("GPUCLI_DEBUG", "1")
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()
    try:
        failed = runner.invoke(app, ["embed", f"s3://{bucket}/tree", "--out", str(tmp_path / "y.parquet"),
                                     "--json", "--progress", "plain", "--devices", "cpu"])
    finally:
        S3FileSystem.clear_instance_cache()
    everything = failed.output + "".join(traceback.format_exception(failed.exception)) if failed.exception \
        else failed.output
    assert isinstance(failed.exception, RunFailedError), failed.output  # GPUCLI_DEBUG: the error itself, raised
    assert "cannot list it: the store kept failing (after 4 attempts" in str(failed.exception)
    assert SECRET not in everything and not (tmp_path / "y.parquet").exists()


def test_roots_that_name_objects_are_those_objects_relative_to_their_prefix(s3, bucket, tmp_path):
    summary = run_fake([f"s3://{bucket}/tree/a.txt", f"s3://{bucket}/tree/sub/c.txt"], tmp_path / "out.parquet")
    assert (summary.exit_code, summary.succeeded) == (0, 2)
    assert {p for p, _ in rows(tmp_path / "out.parquet")} == {"a.txt", "sub/c.txt"}


def refused(root: str, out: Path, *extra: str):
    """A CLI run on `root` with --json: what a cron log and a script see."""
    return CliRunner().invoke(app, ["embed", root, "--out", str(out), "--json", "--progress", "plain",
                                    "--devices", "cpu", *extra])


def test_a_bucket_that_does_not_exist_is_refused_before_any_work_naming_the_root(s3, tmp_path):
    """As a missing directory is: exit 2, one error line naming the root, nothing written, and the
    same on every run after it (a failure record made the second run exit 0)."""
    out = tmp_path / "out.parquet"
    for _ in range(3):
        result = refused("s3://no-such-bucket-here/tree", out)
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == ["gpucli: error: s3://no-such-bucket-here/tree: no such bucket "
                                              "(NoSuchBucket (404)); check the bucket name in the URL and the region"]
        assert refusal(result.stdout, result.exit_code) and list(tmp_path.iterdir()) == []
        assert SECRET not in result.output


def test_a_dry_run_refuses_a_missing_bucket_as_a_run_does(s3, tmp_path):
    """--dry-run answers what a run would do: a missing bucket is exit 2, not a 'fail' line and 0."""
    result = refused("s3://no-such-bucket-here/tree", tmp_path / "out.parquet", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "no such bucket" in result.stderr and "no such bucket" in refusal(result.stdout, 2)["error"]


@pytest.mark.parametrize("root,denied", [("tree", ("tree",)), ("", ("",))], ids=["prefix", "bucket"])
def test_a_root_the_credentials_may_not_list_is_refused_before_any_work(s3, bucket, tmp_path, root, denied):
    s3.faults.denied_prefixes = denied
    url = f"s3://{bucket}/{root}".rstrip("/")
    result = refused(url, tmp_path / "out.parquet")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"gpucli: error: {url}: access denied (AccessDenied (403)): the "
                                          "credentials may not list it; check the policy (or the key) for this prefix "
                                          f"({roots.CREDENTIALS['s3fs']})"]
    assert s3.traffic.object_gets == 0 and list(tmp_path.iterdir()) == []


def test_an_object_root_is_read_where_only_listings_are_denied(s3, bucket, tmp_path):
    """GetObject without ListBucket: a root naming an object is read, its prefix refused."""
    s3.faults.unlisted_prefixes = ("tree",)
    summary = run_fake([f"s3://{bucket}/tree/a.txt"], tmp_path / "out.parquet")
    assert (summary.exit_code, summary.succeeded) == (0, 1)
    assert refused(f"s3://{bucket}/tree", tmp_path / "other.parquet").exit_code == 2


def test_a_root_whose_listing_keeps_failing_is_a_run_error_every_time(s3, bucket, tmp_path, quick_retries):
    """A store that keeps failing on the root after the retries: exit 3, one line, no failure
    record and nothing on disk, on every run (a record at '.' made the second run exit 0, its
    failure already known); a rerun once the store answers runs as a first run."""
    s3.faults.failing_list_prefixes = ("tree/",)
    out = tmp_path / "out.parquet"
    for _ in range(3):
        result = refused(f"s3://{bucket}/tree", out)
        assert result.exit_code == 3, result.output
        assert result.stderr.splitlines() == [f"gpucli: error: s3://{bucket}/tree: cannot list it: the store kept "
                                              "failing (after 4 attempts: InternalError (500)); nothing was written, "
                                              "and a rerun tries again"]
        assert refusal(result.stdout, result.exit_code) and list(tmp_path.iterdir()) == []
    s3.clear_faults()
    assert run_fake([f"s3://{bucket}/tree"], out).succeeded == 5


def test_no_credentials_is_a_usage_error_naming_where_they_are_looked_for_on_every_run(s3, tmp_path):
    """The case of a cron job with no credentials in its environment, through the console script:
    exit 2, one line naming the cause and where the credentials are looked for, no failure record,
    nothing written in the directory it runs in; the same on every run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ENDPOINT_URL": s3.endpoint, "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"})
    work = tmp_path / "cwd"
    work.mkdir()
    for _ in range(3):
        result = subprocess.run([sys.executable, "-m", "gpucli", "embed", "s3://no-such-bucket-xyz/", "--json"],
                                capture_output=True, text=True, cwd=work, env=env, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == ["gpucli: error: s3://no-such-bucket-xyz: cannot list it "
                                              "(NoCredentialsError: Unable to locate credentials); "
                                              f"{roots.CREDENTIALS['s3fs']}"]
        assert refusal(result.stdout, 2) and list(work.iterdir()) == []


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_root_that_cannot_be_listed_is_refused_before_either_engine_writes(s3, tmp_path, engine):
    """The check comes before the output is opened, and before Ray starts."""
    result = refused("s3://no-such-bucket-here/tree", tmp_path / "out.parquet", "--engine", engine)
    assert result.exit_code == 2 and "no such bucket" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_out_to_a_bucket_is_refused_with_what_to_do_instead(s3, bucket):
    result = CliRunner().invoke(app, ["embed", f"s3://{bucket}/tree", "--out", f"s3://{bucket}/out.parquet"])
    assert result.exit_code == 2 and "aws s3 sync" in result.stderr


def test_many_keys_are_listed_a_page_at_a_time(s3, tmp_path, monkeypatch):
    """A prefix is a block per page (bounded memory: a page, never the prefix), and every key once."""
    from gpucli.inputs.scope import WalkFilter, WalkReport
    from gpucli.inputs.stores import listing
    from gpucli.inputs.walk import walk_blocks

    s3.put_tree("many-keys", {f"k/{i:04d}.txt": "x" for i in range(250)})
    monkeypatch.setattr(listing, "PAGE_KEYS", 40)
    report = WalkReport()
    blocks = [b for b in walk_blocks(["s3://many-keys/k"], WalkFilter((".txt",)), report=report) if b]
    assert [len(b) for b in blocks] == [40] * 6 + [10]
    assert [s.id for b in blocks for s in b] == list(range(250)) and report.complete and not report.unlisted


def test_a_ray_run_on_the_bucket_equals_the_local_one(s3, bucket, tmp_path):  # a private Ray: its actors see AWS_*
    """The actors read the objects themselves: no shared filesystem (the driver lists only)."""
    local = run_with("local", "tests.fake_task:FakeTask", [f"s3://{bucket}/tree"], tmp_path / "local.parquet")
    s3.traffic.reset()
    remote = run_with("ray", "tests.fake_task:FakeTask", [f"s3://{bucket}/tree"], tmp_path / "ray.parquet")
    assert (remote.exit_code, remote.succeeded, remote.rows) == (local.exit_code, local.succeeded, local.rows) == \
        (0, 5, 7)
    assert s3.traffic.object_gets == 5
    got = ds.dataset(str(tmp_path / "ray.parquet"), format="parquet").to_table().to_pylist()
    assert sorted(map(str, got)) == sorted(map(str, read_rows(tmp_path / "local.parquet")))


def test_a_table_in_a_bucket_gives_the_rows_of_the_same_table_on_disk(s3, bucket, tmp_path):
    """`embed --from s3://.../posts.csv`: read from a local copy, keyed and dated as the object."""
    table = "id,body\n1,Bees make honey from nectar.\n2,Rivers run to the sea.\n"
    (tmp_path / "posts.csv").write_text(table)
    s3.put_tree(bucket, {"posts.csv": table}, prefix="tables/")
    options = {"text_column": "body", "id_column": "id"}
    local = run_with("local", "tests.fake_task:FakeTask", (), tmp_path / "disk.parquet", from_table=str(
        tmp_path / "posts.csv"), **options)
    remote = run_with("local", "tests.fake_task:FakeTask", (), tmp_path / "s3.parquet",
                      from_table=f"s3://{bucket}/tables/posts.csv", **options)
    assert (remote.exit_code, remote.succeeded) == (local.exit_code, local.succeeded) == (0, 2)

    def keyed(out):
        return sorted((r["path"], r["id"], r["text"]) for r in read_rows(out))

    assert keyed(tmp_path / "s3.parquet") == keyed(tmp_path / "disk.parquet") == [
        ("posts.csv", "1", "Bees make honey from nectar."), ("posts.csv", "2", "Rivers run to the sea.")]
