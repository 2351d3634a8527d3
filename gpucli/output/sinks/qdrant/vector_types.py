"""`--vector-type` in Qdrant (issue 30): Qdrant's own way for each type, on the float vectors
gpucli sends (a Qdrant output's rows keep float32: gpucli/core/vectors.py).

- `float16`: the vector's datatype FLOAT16: Qdrant stores the vectors as half floats.
- `int8`: scalar quantization (INT8, quantile 0.99, Qdrant's calibration on the collection's own
  data), originals on disk: Qdrant searches the int8 copy in RAM and rescores with the
  originals. Not the datatype UINT8: that stores uint8 values as they are given, meant for
  models that emit uint8; gpucli's signed, per-dimension codes would need an offset that changes
  every cosine.
- `binary`: binary quantization, originals on disk, rescored by Qdrant.

Embedded mode (Qdrant Edge) applies them as a server does. A collection keeps the settings it
was made with; `--full` makes it again with the new ones. Each client spells a `Storage` in its
own library's types (server.py, edge/models.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Storage:
    """How Qdrant stores the vectors of one `--vector-type`."""

    datatype: str | None = None  # "float16"
    on_disk: bool | None = None  # the originals, when a quantized copy is searched in RAM
    quantization: str | None = None  # "int8" (scalar) | "binary"
    quantile: float = 0.99  # scalar quantization's calibration


STORAGE = {"float32": Storage(), "float16": Storage(datatype="float16"),
           "int8": Storage(on_disk=True, quantization="int8"), "binary": Storage(on_disk=True, quantization="binary")}

OVERSAMPLING = {"int8": 2.0, "binary": 3.0}  # candidates from the quantized vectors, per hit asked


def storage(vector_type: str) -> Storage:
    return STORAGE.get(vector_type, Storage())


def stored_type(datatype: str | None, quantization: str | None) -> str:
    """The vector type a collection was made for, from its vector's datatype and quantization
    ("scalar" / "binary", the key Qdrant's JSON names it by)."""
    if datatype == "float16":
        return "float16"
    if quantization in ("scalar", "int8"):
        return "int8"
    if quantization == "binary":
        return "binary"
    return "float32"


def oversampling(vector_type: str) -> float | None:
    """`gpucli search` over a quantized collection rescores with the original vectors, taking
    this many times the hits asked from the quantized ones (Qdrant's advice for binary: 2-3x);
    None for other types."""
    return OVERSAMPLING.get(vector_type)
