#!/usr/bin/env bash
# Installs the peer loaders the generic loader suite tests (python -m properties.loaders, docs/loaders.md)
# into the CURRENT interpreter (use a venv: python3 -m venv --system-site-packages .venv-peers), pinned,
# without ever replacing the installed CPU torch:
#   * torchdata 0.11.0, grain 0.2.18, datasets 5.2.0: normal installs (none of them asks for another torch);
#   * litdata 0.2.76 and mosaicml-streaming 0.13.0 declare torchvision (and streaming: numpy<2.2,
#     transformers<5, cloud SDKs), and torchvision drags a CUDA torch build: both go in with --no-deps, plus
#     the few packages they import at run time.  torchvision itself is NOT installed; the streaming adapter
#     substitutes a placeholder for the one module of it that streaming imports (streaming.vision).
# Afterwards it checks that torch is the version it found before.  Usage: bash scripts/install_peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
before=$($PY -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)
echo "== peers: torch before: $before"
$PY -m pip install --quiet "torchdata==0.11.0" "grain==0.2.18" "datasets==5.2.0"
$PY -m pip install --quiet --no-deps "litdata==0.2.76" "mosaicml-streaming==0.13.0"
# what litdata imports: lightning-utilities, obstore (filelock, boto3, requests come with the project's extras)
$PY -m pip install --quiet "lightning-utilities==0.15.3" "obstore==0.12.1" filelock requests
# what streaming imports at module level (compression codecs, the catalogue registry, transformers' BatchFeature)
$PY -m pip install --quiet "brotli==1.2.0" "python-snappy==0.7.3" "zstd==1.5.7.2" "catalogue==2.0.10" \
    "transformers==5.24.0" "xxhash>=3,<4"
after=$($PY -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)
echo "== peers: torch after: $after"
if [ "$before" != "$after" ]; then
  echo "install_peers.sh: torch changed from $before to $after; reinstall the pinned CPU torch" >&2
  exit 1
fi
