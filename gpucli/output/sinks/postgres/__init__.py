"""PostgreSQL with pgvector: `--out postgresql://USER@HOST:PORT/DATABASE?table=TABLE` (embed).

    target.py   what `--out` names: libpq's URL, the table, gpucli's options; no connection
    store.py    the connection, its advisory lock, transactions retried whole, errors in words
    rows.py     the table's columns from the Arrow schema; a part as one binary COPY stream
    ledger.py   the ledger in the same database: rows, deletes and entries in one transaction
    sink.py     the sink: the table made or checked, reset, widened, indexed (HNSW) at close

psycopg comes with the postgres extra (`pip install 'gpucli[postgres]'`); without it an output
named postgresql://... is refused (exit 2) with that command.
"""

from gpucli.output.sinks.postgres.sink import PostgresSink
from gpucli.output.sinks.postgres.target import is_postgres, parse_target

__all__ = ["PostgresSink", "is_postgres", "parse_target"]
