"""Real GCS and Azure Blob APIs on 127.0.0.1 for the gs:// and az:// bucket tests (issue 31):
gcp-storage-emulator (PyPI) and Azurite (npm), each a process of its own on a free port, behind
a small proxy that counts object reads and injects faults (503 on a key's first reads, 500 on
every listing page past the first).

gcp-storage-emulator answers objects.list whole (it ignores maxResults and pageToken); the proxy
pages its answer as GCS does (items and prefixes in name order, maxResults of them, an opaque
nextPageToken), so that gcsfs's paging is exercised. Azurite pages List Blobs itself.

Clients talk to the proxy through each library's own setting: `STORAGE_EMULATOR_HOST` (gcsfs),
`AZURE_STORAGE_CONNECTION_STRING`'s BlobEndpoint (adlfs). The tests' own writes go straight to
the emulator (plain HTTP for GCS, the Azure SDK's sync client for Azurite), uncounted."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

AZURITE_VERSION = "3.37.0"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, in Microsoft's docs): the tests look for it in every output
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class Faults:
    slowdown: dict[str, int] = field(default_factory=dict)  # "bucket/key" -> reads still answered 503
    failing_next_pages: bool = False  # listings past their first page: 500, always


@dataclass
class Traffic:
    reads: Counter = field(default_factory=Counter)  # "bucket/key" -> object reads (GETs of the bytes)
    lists: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.reads.clear()
            self.lists = 0

    @property
    def object_reads(self) -> int:
        return sum(self.reads.values())


class _Gcs:
    """How GCS's JSON API names reads and listings, and says 503."""

    read = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/(.+)$")
    listing = re.compile(r"^/storage/v1/b/([^/]+)/o$")

    def read_key(self, method: str, path: str, query: dict) -> str | None:
        match = self.read.match(path)
        return f"{match.group(1)}/{match.group(2)}" if method == "GET" and match and "alt" in query else None

    def is_listing(self, method: str, path: str, query: dict) -> bool:
        return method == "GET" and self.listing.match(path) is not None

    def next_page(self, query: dict) -> bool:
        return "pageToken" in query

    def error(self, status: int, code: str) -> tuple[list[tuple[str, str]], bytes]:
        body = json.dumps({"error": {"code": status, "message": code, "errors": [{"reason": code}]}}).encode()
        return [("Content-Type", "application/json")], body

    def page(self, query: dict, body: bytes) -> bytes:
        """The emulator's whole answer cut to the page GCS would give."""
        if "maxResults" not in query:
            return body
        whole = json.loads(body)
        entries = sorted([(i["name"], "item", i) for i in whole.get("items", [])]
                         + [(p, "prefix", p) for p in whole.get("prefixes", [])], key=lambda e: e[0])
        start, size = int(query.get("pageToken", ["0"])[0]), int(query["maxResults"][0])
        cut = entries[start:start + size]
        page = {"kind": "storage#objects", "items": [e[2] for e in cut if e[1] == "item"],
                "prefixes": [e[2] for e in cut if e[1] == "prefix"]}
        if start + size < len(entries):
            page["nextPageToken"] = str(start + size)
        return json.dumps(page).encode()


class _Azure:
    """How the Blob service names reads and listings (path-style: /account/container/blob)."""

    read = re.compile(rf"^/{AZURITE_ACCOUNT}/([^/]+)/(.+)$")

    def read_key(self, method: str, path: str, query: dict) -> str | None:
        match = self.read.match(path)
        plain = "comp" not in query and "restype" not in query
        return f"{match.group(1)}/{match.group(2)}" if method == "GET" and match and plain else None

    def is_listing(self, method: str, path: str, query: dict) -> bool:
        return method == "GET" and query.get("comp") == ["list"] and query.get("restype") == ["container"]

    def next_page(self, query: dict) -> bool:
        return "marker" in query

    def error(self, status: int, code: str) -> tuple[list[tuple[str, str]], bytes]:
        body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{code}</Message></Error>'
        return [("Content-Type", "application/xml"), ("x-ms-error-code", code)], body.encode()

    def page(self, query: dict, body: bytes) -> bytes:
        return body


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        server, api = self.server, self.server.api
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        path = unquote(parts.path)
        key = api.read_key(method, path, query)
        listing = api.is_listing(method, path, query)
        with server.traffic.lock:
            if key:
                server.traffic.reads[key] += 1
            server.traffic.lists += listing
        if listing and server.faults.failing_next_pages and api.next_page(query):
            return self._send(500, *reversed(api.error(500, "InternalError")))
        if key and self._take(key):
            return self._send(503, *reversed(api.error(503, "ServerBusy")))
        status, headers, body = self._forward(method)
        if listing and status == 200:
            body = api.page(query, body)
        self._send(status, body, headers, head=method == "HEAD")

    def _take(self, key: str) -> bool:
        with self.server.traffic.lock:
            if self.server.faults.slowdown.get(key, 0) > 0:
                self.server.faults.slowdown[key] -= 1
                return True
        return False

    def _forward(self, method: str) -> tuple[int, list[tuple[str, str]], bytes]:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
            conn.request(method, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            kept = [(k, v) for k, v in response.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive")]
            if method == "HEAD":
                kept.append(("Content-Length", response.getheader("Content-Length") or "0"))
            return response.status, kept, data
        finally:
            conn.close()

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]], head: bool = False) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port: int, api: _Gcs | _Azure) -> None:
        super().__init__(("127.0.0.1", 0), _Proxy)
        self.upstream_port, self.api = upstream_port, api
        self.faults, self.traffic = Faults(), Traffic()


class _Emulator:
    """A server process, the proxy in front of it, and its lifecycle (stopped: no process left)."""

    protocol = ""
    secret = ""  # a credential the runs must never print ('' where the emulator takes none)

    def __init__(self, process: subprocess.Popen, port: int, api: _Gcs | _Azure, workdir: str) -> None:
        self.process, self.port, self.workdir = process, port, workdir
        self.upstream = f"http://127.0.0.1:{port}"
        self.proxy = _ProxyServer(port, api)
        threading.Thread(target=self.proxy.serve_forever, daemon=True, name=f"{self.protocol}-proxy").start()
        self.endpoint = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    @property
    def faults(self) -> Faults:
        return self.proxy.faults

    @property
    def traffic(self) -> Traffic:
        return self.proxy.traffic

    def clear_faults(self) -> None:
        self.proxy.faults = Faults()

    def put_tree(self, bucket: str, files: dict[str, str | bytes], prefix: str = "") -> None:
        self.make_bucket(bucket)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda item: self.put(bucket, prefix + item[0], item[1]), files.items()))

    def stop(self) -> None:
        self.proxy.shutdown()
        self.proxy.server_close()
        _end(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def make_bucket(self, bucket: str) -> None:
        raise NotImplementedError

    def put(self, bucket: str, key: str, data: str | bytes) -> None:
        raise NotImplementedError


class GcsEmulator(_Emulator):
    protocol = "gs"

    @classmethod
    def start(cls) -> GcsEmulator:
        port = _free_port()
        workdir = tempfile.mkdtemp(prefix="gpucli-gcs-")
        process = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                                    "--port", str(port), "--in-memory", "--quiet"], cwd=workdir,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(process, f"http://127.0.0.1:{port}/storage/v1/b?project=test")
        return cls(process, port, _Gcs(), workdir)

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def _call(self, method: str, path: str, data: bytes | None = None, ctype: str = "application/json") -> bytes:
        request = urllib.request.Request(self.upstream + path, data=data, method=method,
                                         headers={"Content-Type": ctype})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def make_bucket(self, bucket: str) -> None:
        try:
            self._call("POST", "/storage/v1/b?project=test", json.dumps({"name": bucket}).encode())
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # already there
                raise

    def put(self, bucket: str, key: str, data: str | bytes) -> None:
        body = data.encode() if isinstance(data, str) else data
        self._call("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}", body,
                   "application/octet-stream")

    def delete(self, bucket: str, key: str) -> None:
        self._call("DELETE", f"/storage/v1/b/{bucket}/o/{quote(key, safe='')}")

    def mtimes(self, bucket: str) -> dict[str, str]:
        listing = json.loads(self._call("GET", f"/storage/v1/b/{bucket}/o"))
        return {i["name"]: i["updated"] for i in listing.get("items", [])}

    @staticmethod
    def clear_cache() -> None:
        from gcsfs import GCSFileSystem

        GCSFileSystem.clear_instance_cache()


class AzuriteServer(_Emulator):
    protocol = "az"
    secret = AZURITE_KEY

    @classmethod
    def start(cls, binary: Path) -> AzuriteServer:
        workdir = tempfile.mkdtemp(prefix="gpucli-azurite-")
        log = Path(workdir) / "azurite.out"
        with open(log, "wb") as out:
            process = subprocess.Popen([str(binary), "--blobHost", "127.0.0.1", "--blobPort", "0",
                                        "--inMemoryPersistence", "--silent", "--skipApiVersionCheck", "--loose",
                                        "--disableTelemetry"], cwd=workdir, stdout=out,
                                       stderr=subprocess.STDOUT)
        port = _port_from_log(process, log)
        return cls(process, port, _Azure(), workdir)

    def connection_string(self, endpoint: str | None = None, key: str = AZURITE_KEY) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
                f"BlobEndpoint={endpoint or self.endpoint}/{AZURITE_ACCOUNT};")

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    def client(self):
        """The Azure SDK's sync client straight to Azurite (no proxy): the tests' own writes."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string(self.upstream), retry_total=0)

    def make_bucket(self, bucket: str) -> None:
        from azure.core.exceptions import ResourceExistsError

        try:
            self.client().create_container(bucket)
        except ResourceExistsError:
            pass

    def put(self, bucket: str, key: str, data: str | bytes) -> None:
        self.client().get_blob_client(bucket, key).upload_blob(data, overwrite=True)

    def delete(self, bucket: str, key: str) -> None:
        self.client().get_blob_client(bucket, key).delete_blob()

    @staticmethod
    def clear_cache() -> None:
        from adlfs import AzureBlobFileSystem

        AzureBlobFileSystem.clear_instance_cache()


def azurite_binary(cache: Path) -> Path:
    """`azurite-blob` of Azurite AZURITE_VERSION, installed under `cache` by npm on first use (a
    lock keeps two test sessions from installing at once). RuntimeError when npm fails."""
    binary = cache / "node_modules" / ".bin" / "azurite-blob"
    marker = cache / f"installed-{AZURITE_VERSION}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.exists() and binary.exists()):
            done = subprocess.run(["npm", "install", "--prefix", str(cache), f"azurite@{AZURITE_VERSION}",
                                   "--no-audit", "--no-fund", "--loglevel=error"], capture_output=True, text=True,
                                  timeout=600)
            if done.returncode != 0 or not binary.exists():
                raise RuntimeError(f"npm install azurite@{AZURITE_VERSION} failed:\n{done.stderr[-2000:]}")
            marker.write_text(AZURITE_VERSION)
    return binary


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(process: subprocess.Popen, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the emulator exited ({process.returncode}) before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    _end(process)
    raise RuntimeError(f"the emulator did not answer {url} within {timeout_s:g} s")


def _port_from_log(process: subprocess.Popen, log: Path, timeout_s: float = 30.0) -> int:
    """Azurite, started on port 0, prints the one it took: '... successfully listens on http://127.0.0.1:PORT'."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            raise RuntimeError(f"Azurite exited ({process.returncode}): {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    _end(process)
    raise RuntimeError(f"Azurite did not start within {timeout_s:g} s: {log.read_text(errors='replace')[-2000:]}")


def _end(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def use_env(env: dict[str, str]) -> dict[str, str | None]:
    """Set `env` in this process (and the processes it starts); returns what to restore."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return saved


def restore_env(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
