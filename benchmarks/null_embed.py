"""A null device for the host-path benchmark: the real embed task in the parent (decode,
tokenize, chunk, batch, rows, Parquet, ledger), and a worker that loads nothing and returns
a constant 384-d vector per item. What remains is gpucli's own host cost."""

from __future__ import annotations

from typing import Any

from gpucli.tasks.embed import EmbedTask


class NullEmbedTask(EmbedTask):
    name = "null-embed"

    def cpu_workers(self, cores: int) -> int:
        """One worker, as for one accelerator: the null device stands for a device that costs
        nothing, not for CPU inference (where embed runs a worker per core)."""
        return 1

    def setup(self, device: str) -> None:
        import numpy as np

        self.vector = np.full(384, 0.05, dtype=np.float32)

    def predict(self, payloads: Any) -> Any:
        import numpy as np

        return np.broadcast_to(self.vector, (len(payloads), 384))


NULL = "benchmarks.null_embed:NullEmbedTask"
