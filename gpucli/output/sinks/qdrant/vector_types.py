"""`--vector-type` in Qdrant (issue 30): Qdrant's own way for each type, on the float vectors
gpucli sends (a Qdrant output's rows keep float32: gpucli/core/vectors.py).

- `float16`: `VectorParams(datatype=FLOAT16)`: Qdrant stores the vectors as half floats.
- `int8`: scalar quantization (`ScalarQuantization(INT8, quantile 0.99)`, Qdrant's calibration on
  the collection's own data), originals on disk: Qdrant searches the int8 copy in RAM and rescores
  with the originals. Not `Datatype.UINT8`: that stores uint8 values as they are given, meant for
  models that emit uint8; gpucli's signed, per-dimension codes would need an offset that changes
  every cosine.
- `binary`: binary quantization (`BinaryQuantization`), originals on disk, rescored by Qdrant.

Embedded mode (Qdrant Edge) applies them as a server does. A collection keeps the settings it
was made with; `--full` makes it again with the new ones.
"""

from __future__ import annotations

from typing import Any


def params(vector_type: str) -> dict[str, Any]:
    """Keyword arguments for `VectorParams` beside size and distance."""
    from qdrant_client import models

    if vector_type == "float16":
        return {"datatype": models.Datatype.FLOAT16}
    if vector_type == "int8":
        return {"on_disk": True, "quantization_config": models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99))}
    if vector_type == "binary":
        return {"on_disk": True, "quantization_config": models.BinaryQuantization(
            binary=models.BinaryQuantizationConfig())}
    return {}


def stored_type(info: Any) -> str:
    """The vector type an existing collection was made for (its vector's datatype or quantization,
    else the collection's quantization)."""
    vectors = info.config.params.vectors
    datatype = getattr(getattr(vectors, "datatype", None), "value", None)
    if datatype == "float16":
        return "float16"
    quantization = getattr(vectors, "quantization_config", None) or getattr(info.config, "quantization_config", None)
    if quantization is not None and getattr(quantization, "scalar", None) is not None:
        return "int8"
    if quantization is not None and getattr(quantization, "binary", None) is not None:
        return "binary"
    return "float32"


OVERSAMPLING = {"int8": 2.0, "binary": 3.0}  # candidates from the quantized vectors, per hit asked


def search_params(vector_type: str) -> Any:
    """`gpucli search` over a quantized collection: rescore with the original vectors, taking
    OVERSAMPLING times the hits asked from the quantized ones (Qdrant's advice for binary: 2-3x);
    None for other types. Qdrant Edge (embedded) rescores too."""
    if vector_type not in OVERSAMPLING:
        return None
    from qdrant_client import models

    return models.SearchParams(quantization=models.QuantizationSearchParams(
        rescore=True, oversampling=OVERSAMPLING[vector_type]))
