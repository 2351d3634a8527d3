"""The output side: accounting of results, parts, the writer, the ledger, the lock and the sinks."""
