#!/usr/bin/env bash
# What to run when a GPU is lent (DEVELOPERS.md; issue 38): one prepared script, about 6 minutes of device time.
#   here, with PyPI reachable:   bash benchmarks/gpu_checks.sh prepare   (the wheels the device's Python 3.12
#                                lacks, into .whl/; keep it out of git: echo /.whl/ >> .git/info/exclude)
#   on the device, carrying .whl: bash benchmarks/gpu_checks.sh run
# It prints the card, the gpu tier's result and each benchmark's lines: copy them into benchmarks/RESULTS.md
# with the card's name. Each step has its own timeout, so one that hangs leaves time for the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(submitit pyyaml tensorboard pytest pytest-xdist pandas)

case "${1:-}" in
prepare)
    rm -rf .whl && mkdir .whl
    platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
    python3 -m pip download -q -d .whl --python-version 3.12 "${platforms[@]}" --only-binary=:all: "${PACKAGES[@]}"
    ls .whl | wc -l
    ;;
run)
    python3 -m pip install -q --break-system-packages --no-index --find-links .whl "${PACKAGES[@]}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
    export PYTHONPATH=$PWD
    echo "== the gpu tier"
    timeout 150 python3 -m pytest -m gpu tests/gpu -o addopts="" -q -rs
    echo "== step time, launch-bound (U-Net width 16 at 64 px: mostly kernel launches)"
    timeout 240 python3 benchmarks/trainer_overhead.py --device cuda --nproc 1 --steps 100 --rounds 7 --skip-lightning
    echo "== step time, compute-bound (width 64)"
    timeout 120 python3 benchmarks/trainer_overhead.py --device cuda --nproc 1 --steps 100 --rounds 3 --skip-lightning \
        --width 64
    echo "== a resume's memory, the state restored to the GPU"
    timeout 90 python3 benchmarks/resume_memory.py --device cuda --width 64 --rounds 2
    ;;
*)
    echo "usage: bash benchmarks/gpu_checks.sh prepare|run" >&2
    exit 2
    ;;
esac
