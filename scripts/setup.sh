#!/usr/bin/env bash
# Idempotent setup: installs the system and Python packages xjit needs, skipping what is there.
# Used by `make demo` and `make test` (and so by CI on a fresh machine).
set -euo pipefail

# libzstd-dev: LLVM's component archives, which libxjit_native links (docs/decisions.md), name
# zstd::libzstd_shared, which LLVM's CMake package defines only when it finds zstd's headers.
# lld-19 links libxjit_native with its load-time code grouped (src/python/CMakeLists.txt).
APT_PACKAGES=(llvm-19-dev llvm-19-tools libzstd-dev lld-19 libdnnl-dev libgtest-dev clang-format-19
  ccache ninja-build)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
# torch is pinned: an unpinned request would pull a CUDA build.
need_py=()
"$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null || need_py+=("torch==2.13.0")
"$PY" -c "import numpy" 2>/dev/null || need_py+=("numpy")
"$PY" -c "import pytest" 2>/dev/null || need_py+=("pytest")
"$PY" -c "import lit" 2>/dev/null || need_py+=("lit")
"$PY" -c "import nanobind" 2>/dev/null || need_py+=("nanobind")
"$PY" -c "import scikit_build_core" 2>/dev/null || need_py+=("scikit-build-core")
# The model tests (BERT, GPT-2, the zoo models) build Hugging Face models from configs; without
# transformers they would skip. Pinned as in bench/requirements.txt (it does not pull torch).
"$PY" -c "import transformers, sys; sys.exit(transformers.__version__ != '5.23.0')" 2>/dev/null || need_py+=("transformers==5.23.0")
"$PY" -c "import ninja" 2>/dev/null || command -v ninja >/dev/null || need_py+=("ninja")
if ((${#need_py[@]})); then
  echo "setup: installing Python packages: ${need_py[*]}"
  "$PY" -m pip install -q "${need_py[@]}"
fi
