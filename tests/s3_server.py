"""A real S3 API on 127.0.0.1 for the bucket tests: moto in server mode (the server s3fs's own
suite runs against), behind a small proxy that counts requests and injects faults.

The proxy forwards every request to moto and can, per key or prefix: answer 503 SlowDown for the
first N GETs, cut a body short and close the connection (a reset mid-object), answer 403
AccessDenied, fail listings with 500 (the benchmark's latency is benchmarks/latency_proxy.py's).
Clients talk to the proxy through `AWS_ENDPOINT_URL`, as a user of an S3-compatible store would."""

from __future__ import annotations

import http.client
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

SECRET = "gpucli-test-SECRET-0123456789abcdef"  # the tests look for it in every output
ACCESS_KEY = "AKIAGPUCLITESTKEY000"


@dataclass
class Faults:
    """What the proxy does to requests (keys are object keys without the bucket)."""

    slowdown: dict[str, int] = field(default_factory=dict)  # key -> GETs still answered 503 SlowDown
    reset: dict[str, int] = field(default_factory=dict)  # key -> GETs still cut mid-body
    denied_prefixes: tuple[str, ...] = ()  # GETs and listings under these: 403 AccessDenied
    unlisted_prefixes: tuple[str, ...] = ()  # listings alone under these: 403 (GetObject without ListBucket)
    failing_list_prefixes: tuple[str, ...] = ()  # listings of these prefixes: 500 InternalError, always
    failing_next_pages: bool = False  # listings past their first page: 500 InternalError, always
    gone: tuple[str, ...] = ()  # GETs of these keys: 404 NoSuchKey (deleted between the listing and the read)


@dataclass
class Traffic:
    """What went through the proxy: object GETs per key, listings, HEADs."""

    gets: Counter = field(default_factory=Counter)
    lists: int = 0
    heads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.gets.clear()
            self.lists = self.heads = 0

    @property
    def object_gets(self) -> int:
        return sum(self.gets.values())


def _error(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>gpucli-test</RequestId></Error>").encode()


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK cost 40 ms each
    server: _ProxyServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        server, faults = self.server, self.server.faults
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        _, _, key = unquote(parts.path).lstrip("/").partition("/")
        listing = method == "GET" and not key and "list-type" in query
        with server.traffic.lock:
            if listing:
                server.traffic.lists += 1
            elif method == "GET" and key:
                server.traffic.gets[key] += 1
            elif method == "HEAD":
                server.traffic.heads += 1
        prefix = query.get("prefix", [""])[0]
        if listing and any(prefix.startswith(p) for p in faults.failing_list_prefixes):
            return self._send(500, _error("InternalError", "We encountered an internal error. Please try again."))
        if listing and faults.failing_next_pages and "continuation-token" in query:
            return self._send(500, _error("InternalError", "We encountered an internal error. Please try again."))
        if (listing and any(prefix.startswith(p) for p in faults.denied_prefixes + faults.unlisted_prefixes)) or \
                (key and method in ("GET", "HEAD") and any(key.startswith(p) for p in faults.denied_prefixes)):
            return self._send(403, _error("AccessDenied", "Access Denied"))
        if method == "GET" and key in faults.gone:
            return self._send(404, _error("NoSuchKey", "The specified key does not exist."))
        if method == "GET" and key and self._take(faults.slowdown, key):
            return self._send(503, _error("SlowDown", "Please reduce your request rate."))
        status, headers, body = self._forward(method)
        if method == "GET" and key and status == 200 and len(body) > 1 and self._take(faults.reset, key):
            return self._cut(headers, body)
        self._send(status, body, headers, head=method == "HEAD")

    def _take(self, faults: dict[str, int], key: str) -> bool:
        with self.server.traffic.lock:
            if faults.get(key, 0) > 0:
                faults[key] -= 1
                return True
        return False

    def _forward(self, method: str) -> tuple[int, list[tuple[str, str]], bytes]:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=30)
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

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None,
              head: bool = False) -> None:
        self.send_response(status)
        for k, v in headers or [("Content-Type", "application/xml")]:
            self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _cut(self, headers: list[tuple[str, str]], body: bytes) -> None:
        """The whole length announced, half the body sent, then the connection closed."""
        self.send_response(200)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _Proxy)
        self.upstream = upstream
        self.faults = Faults()
        self.traffic = Traffic()


class S3Server:
    """moto on 127.0.0.1 and the proxy in front of it; `endpoint` is the proxy's URL."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise

        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        self.moto_endpoint = f"http://{host}:{port}"
        self.proxy = _ProxyServer(self.moto.get_host_and_port())
        threading.Thread(target=self.proxy.serve_forever, daemon=True, name="s3-proxy").start()
        self.endpoint = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    @property
    def faults(self) -> Faults:
        return self.proxy.faults

    @property
    def traffic(self) -> Traffic:
        return self.proxy.traffic

    def clear_faults(self) -> None:
        self.proxy.faults = Faults()

    def env(self) -> dict[str, str]:
        """What a user of an S3-compatible store sets: keys, region, endpoint (the proxy's)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint}

    def client(self):
        """A boto3 client straight to moto (no proxy): the tests' own writes are not counted."""
        import boto3

        return boto3.client("s3", endpoint_url=self.moto_endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET, region_name="us-east-1")

    def put_tree(self, bucket: str, files: dict[str, str | bytes], prefix: str = "") -> None:
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for rel, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            client.put_object(Bucket=bucket, Key=f"{prefix}{rel}", Body=data)

    def stop(self) -> None:
        self.proxy.shutdown()
        self.proxy.server_close()
        self.moto.stop()


def use_server(server: S3Server) -> None:
    """Point this process (and the processes it starts) at `server`, with no other AWS setting."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    os.environ.update(server.env())
    try:
        from s3fs import S3FileSystem

        S3FileSystem.clear_instance_cache()
    except ImportError:
        pass
