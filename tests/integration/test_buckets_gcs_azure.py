"""gs:// and az:// trees (issue 31) against real local emulators: gcp-storage-emulator and
Azurite (tests/store_emulators.py), each started once per session on a free port and stopped
at the end; Azurite is installed by npm into a cache on first use. The essential behaviours of
tests/integration/test_buckets.py (s3://), for each store: the rows of the same tree on disk,
an unchanged rerun that reads nothing, a changed object read again (new generation / ETag), a
deleted one pruned, retries that are gpucli's alone, a missing bucket named, paging of a
listing, and no credential in any output."""

from __future__ import annotations

import json
import os
import shutil
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("gcsfs")
pytest.importorskip("adlfs")
pytest.importorskip("gcp_storage_emulator")

from gpucli.app.cli import app
from gpucli.core.errors import RunFailedError, UsageError
from gpucli.inputs.stores import retry, roots
from tests.fake_task import FAKE
from tests.helpers import read_rows, refusal, run_fake, run_with, write_tree
from tests.store_emulators import (
    AzuriteServer,
    GcsEmulator,
    azurite_binary,
    restore_env,
    use_env,
)

TEXTS = {"a.txt": "alpha beta gamma\nsecond line here\n", "b.txt": "one two three four\n",
         "sub/c.txt": "deep in a prefix\n", "sub/d.txt": "another one\nand more words\n",
         "sub/deeper/e.txt": "the deepest file\n", "notes.md": "not read by the fake task\n",
         ".hidden.txt": "passed over, as a dot-file is on disk\n"}
_STORE_ENV = ("STORAGE_EMULATOR_HOST", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME",
              "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ANON")


@pytest.fixture(scope="session")
def azurite_installed() -> Path:
    """Azurite from npm, in a cache kept between sessions (CI installs it on its first run)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the az:// tests run Azurite, an npm package (install Node.js and npm)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucli-tests" / "azurite"
    return azurite_binary(cache)


@pytest.fixture(scope="session")
def gcs_server():
    server = GcsEmulator.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite_server(azurite_installed):
    server = AzuriteServer.start(azurite_installed)
    yield server
    server.stop()


@pytest.fixture(params=["gs", "az"])
def store(request):
    """The store under test, this process's environment pointed at it (and nothing else)."""
    server = request.getfixturevalue("gcs_server" if request.param == "gs" else "azurite_server")
    saved = use_env({name: "" for name in _STORE_ENV})
    for name in _STORE_ENV:
        del os.environ[name]
    os.environ.update(server.env())
    server.clear_cache()
    yield server
    server.clear_cache()
    restore_env(saved)


@pytest.fixture
def bucket(store, request):
    """A bucket of this test's own holding TEXTS under `tree/`, and no faults."""
    name = request.node.name.split("[")[0].replace("_", "-")[:40].strip("-").lower() + "-" + store.protocol
    store.put_tree(name, TEXTS, prefix="tree/")
    store.clear_faults()
    store.traffic.reset()
    yield name
    store.clear_faults()


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(attempts=4, base_s=0.02, cap_s=0.1))


def rows(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["path"], r["chunk"]): r for r in read_rows(out)}


def failures(summary) -> list[dict]:
    return sorted((json.loads(line) for line in Path(summary.failures_file).read_text().splitlines()),
                  key=lambda f: f["path"])


def test_a_bucket_gives_the_rows_of_the_same_tree_on_local_disk(store, bucket, tmp_path):
    local = write_tree(tmp_path / "tree", TEXTS)
    from_disk = run_with("local", FAKE, [local], tmp_path / "disk.parquet")
    url = f"{store.protocol}://{bucket}/tree"
    remote = run_with("local", FAKE, [url], tmp_path / "store.parquet")
    assert (remote.exit_code, remote.inputs, remote.succeeded, remote.rows) == \
        (from_disk.exit_code, from_disk.inputs, from_disk.succeeded, from_disk.rows) == (0, 6, 5, 7)  # notes.md skipped
    want, got = rows(tmp_path / "disk.parquet"), rows(tmp_path / "store.parquet")
    assert got.keys() == want.keys()
    for key, row in got.items():
        assert {k: v for k, v in row.items() if k not in ("embedding", "mtime")} == \
            {k: v for k, v in want[key].items() if k not in ("embedding", "mtime")}
        assert max(abs(a - b) for a, b in zip(row["embedding"], want[key]["embedding"], strict=True)) < 1e-6
    assert store.traffic.object_reads == 5 and f"{bucket}/tree/.hidden.txt" not in store.traffic.reads


def test_an_unchanged_rerun_reads_no_object_a_changed_one_alone_and_a_deleted_one_is_pruned(
        store, bucket, tmp_path):
    out, url = tmp_path / "out.parquet", f"{store.protocol}://{bucket}/tree"
    first = run_fake([url], out, prune=True)
    assert (first.exit_code, first.succeeded, first.failed) == (0, 5, 0)
    store.traffic.reset()
    again = run_fake([url], out, prune=True)
    assert (again.exit_code, again.unchanged, again.rows) == (0, 5, 0)
    assert store.traffic.object_reads == 0, store.traffic.reads

    store.put(bucket, "tree/b.txt", "five six seven\n")  # same size: a new generation / ETag
    store.delete(bucket, "tree/sub/c.txt")
    store.traffic.reset()
    third = run_fake([url], out, prune=True)
    assert dict(store.traffic.reads) == {f"{bucket}/tree/b.txt": 1}
    assert (third.exit_code, third.succeeded, third.unchanged, third.pruned) == (0, 1, 3, 1)
    assert {p for p, _ in rows(out)} == {"a.txt", "b.txt", "sub/d.txt", "sub/deeper/e.txt"}
    assert rows(out)[("b.txt", 0)]["text"] == "five six seven"


def test_reader_processes_read_the_objects_and_roots_may_name_objects(store, bucket, tmp_path):
    url = f"{store.protocol}://{bucket}/tree"
    summary = run_fake([f"{url}/a.txt", f"{url}/sub/c.txt"], tmp_path / "out.parquet", read_processes=1)
    assert (summary.exit_code, summary.succeeded) == (0, 2)
    assert {p for p, _ in rows(tmp_path / "out.parquet")} == {"a.txt", "sub/c.txt"}


def test_throttling_is_retried_by_gpucli_alone_and_bounded(store, bucket, tmp_path, quick_retries):
    """The libraries' own retries are off: the reads counted are retry.POLICY's attempts, no more."""
    store.faults.slowdown = {f"{bucket}/tree/a.txt": 2, f"{bucket}/tree/b.txt": 99}
    summary = run_fake([f"{store.protocol}://{bucket}/tree"], tmp_path / "out.parquet")
    assert store.traffic.reads[f"{bucket}/tree/a.txt"] == 3 and store.traffic.reads[f"{bucket}/tree/b.txt"] == 4
    assert (summary.exit_code, summary.succeeded) == (1, 4) and [f["path"] for f in failures(summary)] == ["b.txt"]
    assert "kept failing (after 4 attempts: " in failures(summary)[0]["error"]
    assert "(503)" in failures(summary)[0]["error"]


def test_a_listing_that_fails_on_a_later_page_prunes_nothing_under_its_prefix(store, bucket, tmp_path,
                                                                             quick_retries, monkeypatch):
    from gpucli.inputs.stores import listing

    out, url = tmp_path / "out.parquet", f"{store.protocol}://{bucket}/tree"
    assert run_fake([url], out, prune=True).exit_code == 0
    store.delete(bucket, "tree/a.txt")
    monkeypatch.setattr(listing, "PAGE_KEYS", 1)
    store.faults.failing_next_pages = True
    summary = run_fake([url], out, prune=True)
    assert summary.pruned == 0 and [f["path"] for f in failures(summary)] == ["."]
    assert "InternalError (500)" in failures(summary)[0]["error"] or "HTTP (500)" in failures(summary)[0]["error"]
    assert "a.txt" in {p for p, _ in rows(out)}


def test_a_bucket_that_does_not_exist_is_refused_before_any_work_naming_the_root(store, tmp_path):
    """As a missing directory is: exit 2, one error line naming the root (a container on Azure),
    nothing written, and the same on every run after it."""
    out, root = tmp_path / "out.parquet", f"{store.protocol}://no-such-bucket-here/tree"
    for _ in range(3):
        result = CliRunner().invoke(app, ["embed", root, "--out", str(out), "--json", "--progress", "plain",
                                          "--devices", "cpu"])
        assert result.exit_code == 2, result.output
        kind = "container" if store.protocol == "az" else "bucket"
        [line] = result.stderr.splitlines()
        assert line.startswith(f"gpucli: error: {root}: no such {kind} (") and line.endswith(
            f"check the {kind} name in the URL"), line
        assert store.protocol != "az" or "(ContainerNotFound (404))" in line, "the store's own code, where it gives one"
        assert refusal(result.stdout, result.exit_code) and list(tmp_path.iterdir()) == []


def test_a_store_that_cannot_be_reached_is_a_run_error_every_time(store, bucket, tmp_path, monkeypatch,
                                                                   quick_retries):
    """Nothing listens where the store should be: after the retries, exit 3 with one line, no
    failure record and nothing on disk, on every run (a record at '.' made the second run exit 0)."""
    dead = "http://127.0.0.1:9"
    if store.protocol == "gs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead)
    else:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", store.connection_string(dead))
    root = f"{store.protocol}://{bucket}/tree"
    for _ in range(3):
        store.clear_cache()
        result = CliRunner().invoke(app, ["embed", root, "--out", str(tmp_path / "out.parquet"), "--json",
                                          "--progress", "plain", "--devices", "cpu"])
        assert result.exit_code == 3, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith(f"gpucli: error: {root}: cannot list it: the store kept failing (after 4 attempts: ")
        assert line.endswith("nothing was written, and a rerun tries again"), line
        assert refusal(result.stdout, result.exit_code) and list(tmp_path.iterdir()) == []


def test_many_keys_are_listed_a_page_at_a_time(store, monkeypatch):
    """A prefix is a block per page (bounded memory: a page, never the prefix), and every key once."""
    from gpucli.inputs.scope import WalkFilter, WalkReport
    from gpucli.inputs.stores import listing
    from gpucli.inputs.walk import walk_blocks

    store.put_tree(f"many-keys-{store.protocol}", {f"k/{i:04d}.txt": "x" for i in range(250)})
    monkeypatch.setattr(listing, "PAGE_KEYS", 40)
    store.traffic.reset()
    report = WalkReport()
    blocks = [b for b in walk_blocks([f"{store.protocol}://many-keys-{store.protocol}/k"], WalkFilter((".txt",)),
                                     report=report) if b]
    assert [len(b) for b in blocks] == [40] * 6 + [10]
    assert [s.id for b in blocks for s in b] == list(range(250)) and report.complete and not report.unlisted
    assert store.traffic.lists >= 7, "a request per page"


def test_the_azurite_key_is_never_printed(azurite_server, tmp_path, monkeypatch, quick_retries):
    """A real CLI run, a URL with the key in it, a store that cannot be reached (exit 3) and
    a wrong key (refused, exit 2), with and without GPUCLI_DEBUG's traceback: the summary, the log,
    the error line, the failures file hold no key."""
    server, key = azurite_server, azurite_server.secret
    for name in _STORE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", server.connection_string())
    server.put_tree("secrets", TEXTS, prefix="tree/")
    server.clear_cache()
    runner = CliRunner()
    ok = runner.invoke(app, ["embed", "az://secrets/tree", "--out", str(tmp_path / "ok.parquet"), "--devices", "cpu",
                             "--json", "--progress", "plain"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["succeeded"] == 6, ok.output  # notes.md too
    assert key not in ok.stdout and key not in ok.stderr
    refused = runner.invoke(app, ["embed", f"az://devstoreaccount1:{key}@secrets/tree", "--out",
                                  str(tmp_path / "x.parquet")])
    assert refused.exit_code == 2 and "credentials in a URL are refused" in refused.stderr and key not in refused.output

    wrong = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXk="

    def run(name: str, env: str, debug: bool):
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", env)
        monkeypatch.setenv("GPUCLI_DEBUG", "1" if debug else "")
        server.clear_cache()
        try:
            result = runner.invoke(app, ["embed", "az://secrets/tree", "--out", str(tmp_path / f"{name}.parquet"),
                                         "--json", "--progress", "plain", "--devices", "cpu"])
        finally:
            server.clear_cache()
        everything = result.output + ("".join(traceback.format_exception(result.exception))
                                      if result.exception else "")
        assert key not in everything and wrong not in everything
        return result

    dead = run("dead", server.connection_string("http://127.0.0.1:9"), debug=True)  # a store that cannot be reached
    assert isinstance(dead.exception, RunFailedError) and "after 4 attempts" in str(dead.exception), dead.output
    assert not (tmp_path / "dead.parquet").exists() and not (tmp_path / "dead.failures.jsonl").exists()
    denied = run("wrong", server.connection_string(key=wrong), debug=False)  # the command must change: exit 2
    assert denied.exit_code == 2 and refusal(denied.stdout, 2), denied.output
    assert denied.stderr.splitlines() == ["gpucli: error: az://secrets/tree: access denied (AuthorizationFailure "
                                          "(403)): the credentials may not list it; check the policy (or the key) "
                                          f"for this prefix ({roots.CREDENTIALS['adlfs']})"]
    assert isinstance(run("wrong-debug", server.connection_string(key=wrong), debug=True).exception, UsageError)


def test_the_libraries_errors_are_classified():
    """gcsfs's and the Azure SDK's own exception objects, as they raise them."""
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError, ServiceRequestError
    from gcsfs.retry import HttpError

    kinds = {"gcs 503": (HttpError({"code": 503, "message": "busy"}), retry.ErrorKind.TRANSIENT),
             "gcs 429": (HttpError({"code": 429, "message": "slow down"}), retry.ErrorKind.TRANSIENT),
             "gcs 403": (OSError("Forbidden: b/x/o\nno"), retry.ErrorKind.DENIED),
             "gcs 404": (FileNotFoundError("b/x/o"), retry.ErrorKind.MISSING),
             "az refused": (ServiceRequestError("Cannot connect to host"), retry.ErrorKind.TRANSIENT)}
    busy = HttpResponseError("busy")
    busy.status_code, busy.error_code = 503, "ServerBusy"
    gone = ResourceNotFoundError("gone")
    gone.status_code, gone.error_code = 404, "ContainerNotFound"
    kinds.update({"az 503": (busy, retry.ErrorKind.TRANSIENT), "az 404": (gone, retry.ErrorKind.MISSING)})
    assert {name: retry.classify(exc) for name, (exc, _) in kinds.items()} == {n: k for n, (_, k) in kinds.items()}
    assert retry.short(busy) == "ServerBusy (503)" and retry.short(gone) == "ContainerNotFound (404)"


def test_no_credentials_from_the_azure_and_google_chains_refuse_the_root_naming_where_they_are_looked_for(
        azurite_server, monkeypatch):
    """DefaultAzureCredential's and google.auth's own errors, as they raise them when no credential
    is found (a real chain is not reachable from a test: it asks the cloud's metadata services):
    exit 2 with one line, and the Azure chain's dozen lines of log are not printed beside it."""
    import logging

    from azure.core.exceptions import ClientAuthenticationError
    from google.auth.exceptions import DefaultCredentialsError

    from gpucli.inputs.stores import filesystems
    from gpucli.inputs.stores.url import StoreUrl

    for protocol, exc in (("az", ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token from "
                                                           "the included credentials.\nAttempted credentials: ...")),
                          ("gs", DefaultCredentialsError("Your default credentials were not found."))):
        refusal = roots._refusal(None, StoreUrl.parse(f"{protocol}://b/tree"), exc)
        assert isinstance(refusal, UsageError) and "\n" not in str(refusal)
        package = "adlfs" if protocol == "az" else "gcsfs"
        assert str(refusal).startswith(f"{protocol}://b/tree: cannot list it ({type(exc).__name__}: ")
        assert str(refusal).endswith(roots.CREDENTIALS[package])
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_server.connection_string())
    azurite_server.clear_cache()
    filesystems.filesystem("az")
    assert not logging.getLogger("azure.identity._credentials.chained").isEnabledFor(logging.WARNING)
