#!/usr/bin/env bash
# On the GPU machine (the device tool's run, with .whl carried; prepared here by bench/gpu_prepare.sh):
# install the carried wheels beside the machine's own packages, then run the GPU suite once. Results go
# to $OUT (the folder that comes back) or, without it, bench/results/. Arguments go to the suite
# (default: --device cuda).
#     bash bench/gpu_device.sh [SUITE ARGS...]      exit: the suite's (1 a section failed, 4 the budget cut the
#                                                   run); 3: the wheels did not install
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_device: the wheels in .whl/ did not install" >&2; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
else
  echo "gpu_device: no .whl/ here (carry it): the suite will name what is missing" >&2
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 --version;
 echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores";
 python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)") > "$out/machine.txt" 2>&1
[ $# -gt 0 ] || set -- --device cuda
python3 -m bench.gpu_suite "$@" --out "$out/gpu_suite.md" 2>&1 | tee "$out/gpu_suite.log"
exit "${PIPESTATUS[0]}"
