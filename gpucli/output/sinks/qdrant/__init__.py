"""Qdrant: a server over REST, or Qdrant Edge embedded in this process, on disk.

    --out qdrant://HOST[:PORT]/COLLECTION      server (http; port 6333 by default)
    --out qdrants://HOST[:PORT]/COLLECTION     server over TLS
    --out qdrant:PATH/COLLECTION               embedded (Qdrant Edge): storage directory PATH (qdrant:./qdrant_data/docs)

Options ride in the query string: `?text=false` leaves chunk text out of the payload,
`?batch=N` sets points per upsert (64-256, default 128). The API key comes only from the
`QDRANT_API_KEY` environment variable: never from the URL, never shown.

The package, by role:
    target.py       what `--out` names: parsing, no I/O
    state_dir.py    where the ledger, lock and failures file live; moving a ledger of an earlier version
    protocol.py     what gpucli asks of a collection, in its own types: the calls both modes answer
    connect.py      the client for a target: a server's or the embedded one
    server.py       a server, through qdrant-client (the only mode that imports it); retry.py its retries
    edge/           embedded mode: Qdrant Edge in this process, behind one facade (EdgeClient); its
                    index builds, shard snapshots and the move of an older local-mode collection
    vector_types.py how Qdrant stores each --vector-type
    collection.py   what a run needs of the collection: checking an existing one, creating one
    points.py       rows as points (deterministic ids, payloads, sparse vectors)
    deletes.py      stale chunks of a shorter new version, removed inputs (prune), everything (--full)
    sink.py         the sink: composes the above in open, write, reset, supersede, close and discard
"""

from gpucli.output.sinks.qdrant.connect import connect
from gpucli.output.sinks.qdrant.points import NAMESPACE, point_id
from gpucli.output.sinks.qdrant.protocol import (
           SPARSE_VECTOR,
           Client,
           Described,
           Found,
           Hybrid,
           Lexical,
           Nearest,
           SparseVector,
)
from gpucli.output.sinks.qdrant.retry import Retry, server_message
from gpucli.output.sinks.qdrant.sink import QdrantSink
from gpucli.output.sinks.qdrant.target import API_KEY_ENV, Target, is_qdrant, parse_target

__all__ = ["API_KEY_ENV", "NAMESPACE", "SPARSE_VECTOR", "Client", "Described", "Found", "Hybrid", "Lexical", "Nearest",
           "QdrantSink", "Retry", "SparseVector", "Target", "connect", "is_qdrant", "parse_target", "point_id",
           "server_message"]
