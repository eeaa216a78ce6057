#!/bin/bash
# Collectives through NcclGroup: runs `bench_distributed --nccl` (one rank on
# vulkan:0, an f32 tensor of 2.7 MB by default) and appends two lines to
# bench/results/distributed.jsonl (benchmark nccl_vulkan): one-rank
# all_reduce and all_gather through NCCL on memory Vulkan shares with CUDA,
# against ThreadGroup's host staging (loopback) in the same run. Needs
# libnccl and libcudart where the loader finds them (nccl_group.hpp); run
# bench/report afterwards to update docs/benchmarks.md.
#   bench/nccl.sh [build dir] [rounds] [MB]
# Environment: RESULTS_FILE (/dev/null: print only), BENCH_MACHINE (default:
# "one <the device's name>, Vulkan + NCCL"); see bench/result_line.sh.
set -euo pipefail
. "$(dirname "$0")/result_line.sh"
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/distributed.jsonl}
build=${1:-build/release}
rounds=${2:-5}
mb=${3:-2.7}
out=$("$build/bench/bench_distributed" --nccl "$rounds" "$mb")
echo "$out"
median() { sed -n "s/^median:.* $1 \([0-9.]*\).*/\1/p" <<<"$out"; }
rounds_of() { sed -n "s/^rounds $1 //p" <<<"$out" | tr ' ' ','; }
for k in all_reduce_staged all_reduce_nccl all_gather_staged all_gather_nccl; do
  if ! numbers "$(median "$k")"; then
    echo "the run printed no figure for $k; nothing written to $RESULTS_FILE" >&2
    exit 1
  fi
done
device=$(sed -n 's/^device //p' <<<"$out")
[ -n "${BENCH_MACHINE:-}" ] || BENCH_MACHINE="one $device, Vulkan + NCCL"
about="One rank on one GPU runs a collective on an f32 device tensor. rumus: NcclGroup (src/distributed/nccl_group.cpp): a copy on the device into memory Vulkan exports and CUDA imports, NCCL's collective there on a CUDA stream ordered by timeline semaphores, a copy back on the device; no byte crosses to the host and the host never waits. Peer: ThreadGroup of one rank with loopback in the same run, which stages through mapped host buffers as a rank of a larger group would. GB/s: the tensor's bytes per call. Each figure: the median of 5 runs of 50 calls, each run ending with a wait for the device; median of the rounds."
for v in "all_reduce, 1 rank:all_reduce" "all_gather, 1 rank:all_gather"; do
  name=${v%%:*} key=${v##*:}
  { printf '{"benchmark": "nccl_vulkan", "config": {"what": %s, "MB": %s}, ' "$(json_str "$name")" "$mb"
    printf '"value": %s, "unit": "GB/s", "peer": "ThreadGroup host staging (loopback)", "peer_value": %s, ' \
      "$(median "${key}_nccl")" "$(median "${key}_staged")"
    printf '"rounds": {"value": [%s], "peer_value": [%s]}, "about": %s, ' \
      "$(rounds_of "${key}_nccl")" "$(rounds_of "${key}_staged")" "$(json_str "$about")"
    bench_tail "bench/nccl.sh $build $rounds $mb"; } >>"$RESULTS_FILE"
done
echo "appended 2 lines to $RESULTS_FILE; run bench/report to update docs/benchmarks.md" >&2
