#!/bin/sh
# bench/long_tail_vs_torch.sh on a GPU machine: rumus on vulkan:0 against
# PyTorch on CUDA, and the host's CPU against PyTorch's CPU, in one run.
# Builds bench_long_tail (release preset), checks that both GPU stacks answer,
# appends one line per device and case to bench/results/long_tail.jsonl and
# regenerates docs/benchmarks.md.
#
#   bench/long_tail_gpu.sh [ROUNDS (default 3)] [THREADS (default: every core)]
#
# Environment: PYTHON (a Python whose torch has CUDA; default python3),
# DEVICES (default "cpu vulkan:0"), BENCH_MACHINE (the CPU lines' machine),
# BENCH_GPU_MACHINE (the Vulkan lines', default "one <nvidia-smi's name>,
# Vulkan"), RESULTS_FILE (default bench/results/long_tail.jsonl).
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYTHON DEVICES="${DEVICES:-cpu vulkan:0}"
cmake --preset release >/dev/null
cmake --build --preset release --target bench_long_tail
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "torch " + torch.__version__ + " sees no CUDA device")'
# Fails, naming the device, when this build or machine has no Vulkan device.
build/release/bench/bench_long_tail --device vulkan:0 --reps 1 --only cumsum
bench/long_tail_vs_torch.sh "${1:-3}" "${2:-$(nproc)}"
bench/report
