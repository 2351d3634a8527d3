"""Qdrant: a server over REST, or Qdrant Edge embedded in this process, on disk.

    --out qdrant://HOST[:PORT]/COLLECTION      server (http; port 6333 by default)
    --out qdrants://HOST[:PORT]/COLLECTION     server over TLS
    --out qdrant:PATH/COLLECTION               embedded (Qdrant Edge): storage directory PATH (qdrant:./qdrant_data/docs)

Options ride in the query string: `?text=false` leaves chunk text out of the payload,
`?batch=N` sets points per upsert (64-256, default 128). The API key comes only from the
`QDRANT_API_KEY` environment variable: never from the URL, never shown.

The package, by role:
    target.py      what `--out` names: parsing, no I/O
    state_dir.py   where the ledger, lock and failures file live; moving a ledger of an earlier version
    connection.py  the client, retries with backoff within a budget, error messages
    edge.py        embedded mode: the calls gpucli makes of a QdrantClient, on a Qdrant Edge shard
    edge_models.py qdrant-client's models as Edge's types and back
    local_mode.py  a collection an earlier gpucli wrote in qdrant-client's local mode, moved to Edge
    indexer.py     the shard's HNSW index built in a child process (Edge holds the GIL while it builds)
    snapshot.py    an Edge shard as a shard snapshot a Qdrant server restores
    collection.py  what a run needs of the collection: checking an existing one, creating one
    points.py      rows as points (deterministic ids, payloads, sparse vectors) and their upserts
    deletes.py     stale chunks of a shorter new version, removed inputs (prune), everything (--full)
    sink.py        the sink: composes the above in open, write, reset, supersede and close
"""

from gpucli.output.sinks.qdrant.collection import SPARSE_VECTOR, vector_params
from gpucli.output.sinks.qdrant.connection import Connection, Retry, server_message
from gpucli.output.sinks.qdrant.points import NAMESPACE, chunk_counts, point_id
from gpucli.output.sinks.qdrant.sink import QdrantSink
from gpucli.output.sinks.qdrant.target import API_KEY_ENV, Target, is_qdrant, parse_target

__all__ = ["API_KEY_ENV", "NAMESPACE", "SPARSE_VECTOR", "Connection", "QdrantSink", "Retry", "Target", "chunk_counts",
           "is_qdrant", "parse_target", "point_id", "server_message", "vector_params"]
