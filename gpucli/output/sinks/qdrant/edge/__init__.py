"""Embedded Qdrant: a collection of `qdrant:PATH/COLLECTION` as a Qdrant Edge shard in this
process, behind one facade (`EdgeClient`, the calls of protocol.py), as qdrant-client keeps its
local mode behind `QdrantLocal`. Nothing here imports qdrant-client, except the one-time move of
a collection an earlier gpucli left in qdrant-client's local mode.

The package, by role:
    client.py      EdgeClient: the storage's lock, the shard, gpucli's calls and their errors
    process.py     EdgeProcess: a run's EdgeClient in a child process (Edge's binding holds the GIL)
    models.py      gpucli's calls as Edge's types; a shard's configuration as gpucli's
    files.py       where a collection lives on disk, the storage lock, the metadata file
    space.py       the free-space check before every write (Edge's files are memory-mapped)
    indexer.py     the HNSW index built in a child process (Edge holds the GIL while it builds)
    snapshot.py    a closed shard packed as a shard snapshot a Qdrant server restores
    local_mode.py  a collection of qdrant-client's local mode moved into a shard
"""

from gpucli.output.sinks.qdrant.edge.client import INDEX_FROM_KB, SEARCH_EF, EdgeClient
from gpucli.output.sinks.qdrant.edge.files import discard_new
from gpucli.output.sinks.qdrant.edge.process import EdgeProcess
from gpucli.output.sinks.qdrant.edge.snapshot import export_snapshot

__all__ = ["INDEX_FROM_KB", "SEARCH_EF", "EdgeClient", "EdgeProcess", "discard_new", "export_snapshot"]
