"""Reading small objects from a bucket: gpucli's reader against one request at a time (issue 31).

An S3 server on 127.0.0.1 (moto's `moto_server`, or npm's s3rver with `--server s3rver`, a process of its
own) holds N small text objects. Both sides use
the same s3fs filesystem (gpucli.inputs.stores.filesystems: one HTTP connection pool, no library
retries) and read the same keys, listed once beforehand:

  sequential  a plain loop: `fs.cat_file(url)` for each object, one request at a time
  gpucli      the reader as a run drives it: reader.read_chunks over the listing's blocks
              (64 objects a chunk, 8 chunks in flight, each chunk's reads all started at once),
              with a task whose preparation is free, so that only the reading is timed

  ceiling     what the server serves at all: unsigned GETs from 32 keep-alive connections of
              plain http.client (no S3 client): the most any reader could reach on this machine

Rounds are interleaved (sequential, gpucli, ceiling, sequential, ...) and the medians reported,
with objects/s, the ratio, and gpucli's share of the ceiling. `--latency-ms` puts benchmarks/latency_proxy.py (a TCP relay, a process of its own)
in front of the server, adding that round trip to every request: a real store's first byte is tens of milliseconds away,
a server on the same 2 cores is not (there both sides mostly measure the server's and the client's CPU).

    flock /tmp/gpucli-cpu.lock python benchmarks/bucket_bench.py --objects 10000
    flock /tmp/gpucli-cpu.lock python benchmarks/bucket_bench.py --server s3rver --objects 3000 --latency-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.s3_server import ACCESS_KEY, SECRET  # noqa: E402

BUCKET = "bench"


S3RVER = "3.7.1"  # npm's s3rver: a Node.js S3 server, several times moto's GETs/s on these cores
S3RVER_KEYS = ("S3RVER", "S3RVER")  # its built-in account
S3RVER_PREFIX = Path.home() / ".cache" / "gpucli-bench" / f"s3rver-{S3RVER}"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _s3rver_command(port: int, data: Path) -> list[str]:
    """s3rver's command line, installed with npm under ~/.cache on first use."""
    import shutil
    import subprocess

    main = S3RVER_PREFIX / "node_modules" / ".bin" / "s3rver"
    if not main.exists():
        if not shutil.which("npm"):
            raise SystemExit("--server s3rver needs Node.js and npm")
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(S3RVER_PREFIX),
                        f"s3rver@{S3RVER}"], check=True, stdout=subprocess.DEVNULL)
    return [str(main), "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent",
            "--configure-bucket", BUCKET]


class Servers:
    """The S3 server (moto's `moto_server`, or s3rver) and, with a latency, the relay of
    benchmarks/latency_proxy.py in front of it, each in a process of its own: in the benchmark's
    process they would share its GIL with the client, and a store never runs in its reader's
    process."""

    def __init__(self, kind: str, latency_s: float) -> None:
        import subprocess
        import tempfile

        port = _free_port()
        self.kind = kind
        self.data = tempfile.TemporaryDirectory(prefix="gpucli-bench-s3-")
        if kind == "moto":
            command = [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)]
            self.keys = (ACCESS_KEY, SECRET)
        else:
            command = _s3rver_command(port, Path(self.data.name))
            self.keys = S3RVER_KEYS
        self.server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.server_endpoint = f"http://127.0.0.1:{port}"
        _wait_for(self.server_endpoint)
        self.proxy = None
        self.endpoint = self.server_endpoint
        if latency_s:
            self.proxy = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "latency_proxy.py"), str(port),
                                           str(latency_s * 1000)], stdout=subprocess.PIPE, text=True)
            self.endpoint = f"http://127.0.0.1:{int(self.proxy.stdout.readline())}"

    def client(self, endpoint: str | None = None):
        import boto3

        return boto3.client("s3", endpoint_url=endpoint or self.server_endpoint, aws_access_key_id=self.keys[0],
                            aws_secret_access_key=self.keys[1], region_name="us-east-1")

    def use(self) -> None:
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            del os.environ[name]
        os.environ.update({"AWS_ACCESS_KEY_ID": self.keys[0], "AWS_SECRET_ACCESS_KEY": self.keys[1],
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint})

    def stop(self) -> None:
        for process in (self.proxy, self.server):
            if process is not None:
                process.terminate()
                process.wait(10)
        self.data.cleanup()


def _wait_for(url: str) -> None:
    import urllib.error
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers (s3rver refuses an unsigned request)
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


class FreeTask:
    """A task whose preparation costs nothing: the reader's own work is what is timed."""

    def prepare_many(self, sources, datas):
        return None, []


def seed(server: Servers, count: int) -> None:
    client = server.client()
    if server.kind == "moto":
        client.create_bucket(Bucket=BUCKET)  # s3rver made it at its start
    body = [f"object number {i}: a short sentence of about sixty bytes, like a tweet.\n".encode()
            for i in range(count)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(Bucket=BUCKET, Key=f"small/{i // 1000:02d}/{i:06d}.txt",
                                                  Body=body[i]), range(count)))


def listed() -> tuple[list, float]:
    from gpucli.inputs.scope import WalkFilter
    from gpucli.inputs.walk import walk_blocks

    started = time.perf_counter()
    blocks = [b for b in walk_blocks([f"s3://{BUCKET}/small"], WalkFilter((".txt",))) if b]
    return blocks, time.perf_counter() - started


def sequential(blocks: list) -> float:
    from gpucli.inputs.stores.filesystems import filesystem

    fs = filesystem("s3")
    started = time.perf_counter()
    got = 0
    for block in blocks:
        for source in block:
            got += len(fs.cat_file(source.abspath))
    assert got > 0
    return time.perf_counter() - started


def server_ceiling(blocks: list, server: Servers, threads: int = 32) -> float:
    """What the server can serve at all: GETs of presigned URLs (signed before the clock starts)
    from `threads` keep-alive connections of plain http.client, no S3 client. The most any reader
    can reach here."""
    import http.client
    import threading
    from urllib.parse import urlsplit

    endpoint = server.endpoint
    client = server.client(endpoint)
    paths = []
    for source in (s for block in blocks for s in block):
        bucket, key = source.abspath.split("://", 1)[1].split("/", 1)
        url = urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}))
        paths.append(f"{url.path}?{url.query}")
    where = urlsplit(endpoint)
    local = threading.local()

    def get(path: str) -> int:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        local.conn.request("GET", path)
        response = local.conn.getresponse()
        body = response.read()
        assert response.status == 200, (response.status, body[:200])
        return len(body)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        assert sum(pool.map(get, paths)) > 0
    return time.perf_counter() - started


def gpucli_reader(blocks: list) -> float:
    from gpucli.engines.reader import read_chunks

    async def drain() -> int:
        done = 0
        async for chunk in read_chunks(iter(blocks), FreeTask(), 1 << 20, chunk_files=64, in_flight=8):
            assert not chunk.failures, chunk.failures[:1]
            done += chunk.found
        return done

    started = time.perf_counter()
    done = asyncio.run(drain())
    assert done == sum(map(len, blocks)), done
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", choices=("moto", "s3rver"), default="moto",
                        help="moto's server (the tests' server) or npm's s3rver (a higher ceiling)")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="round trip added to every request by benchmarks/latency_proxy.py")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    server = Servers(args.server, args.latency_ms / 1000)
    server.use()
    try:
        seed(server, args.objects)
        blocks, list_s = listed()
        n = sum(map(len, blocks))
        assert n == args.objects, n
        seq, conc, ceiling = [], [], []
        for _ in range(args.rounds):
            seq.append(sequential(blocks))
            conc.append(gpucli_reader(blocks))
            ceiling.append(server_ceiling(blocks, server))
            print(f"round: sequential {n / seq[-1]:.0f} objects/s, gpucli {n / conc[-1]:.0f} objects/s, "
                  f"server ceiling {n / ceiling[-1]:.0f} objects/s", file=sys.stderr)
    finally:
        server.stop()
    result = {"server": args.server, "objects": n, "latency_ms": args.latency_ms, "list_s": round(list_s, 2),
              "listed_objects_per_s": round(n / list_s), "rounds": args.rounds,
              "sequential_objects_per_s": round(n / statistics.median(seq)),
              "gpucli_objects_per_s": round(n / statistics.median(conc)),
              "ratio": round(statistics.median(seq) / statistics.median(conc), 2),
              "server_ceiling_objects_per_s": round(n / statistics.median(ceiling)),
              "gpucli_of_ceiling": round(statistics.median(ceiling) / statistics.median(conc), 2),
              "sequential_s": [round(s, 2) for s in seq], "gpucli_s": [round(s, 2) for s in conc],
              "ceiling_s": [round(s, 2) for s in ceiling]}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
