#!/usr/bin/env bash
# Here, before a GPU session: the wheels the GPU machine's Python (3.12, x86-64; torch, torchvision, timm,
# CuPy, scipy, scikit-learn, PIL and matplotlib already there) lacks for this project, at the versions
# installed here, into .whl/ (ignored by git). Then, on the GPU machine: bench/gpu_device.sh.
#     bash bench/gpu_prepare.sh            exit 0: the wheels are in .whl/; 2: a package is not installed here
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
mkdir -p .whl
for pkg in kornia kornia_rs autograd array-api-compat submitit; do
  version=$("$py" -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' || true)
  if [ -z "$version" ]; then
    echo "gpu_prepare: $pkg is not installed in $py; install the project first: pip install -e '.[scale,test]'" >&2
    exit 2
  fi
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$pkg==$version"
done
ls -1 .whl
