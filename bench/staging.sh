#!/bin/bash
# How fast a device tensor moves through host staging: runs
# `bench_distributed --staging` (one rank on vulkan:0, an f32 tensor of 2.7 MB
# by default) and appends five lines to bench/results/distributed.jsonl
# (benchmark staging_vulkan): the device-to-host read, the round trip, and
# one-rank all_reduce and all_gather (ThreadGroup with loopback: they stage
# as a rank of a larger group would), each through the staging copies
# (mapped host buffers, transfer queue) against the former path
# (DeviceBackend::read, which drains the queue, and write) in the same run,
# and the all_reduce in pieces against the same copies in one piece;
# run bench/report afterwards to update docs/benchmarks.md.
#   bench/staging.sh [build dir] [rounds] [MB]
# Environment: RESULTS_FILE (/dev/null: print only), BENCH_MACHINE (default:
# "one <the device's name>, Vulkan"); see bench/result_line.sh.
# RUMUS_VULKAN_TRANSFER_QUEUE=0 keeps the copies on the compute queue.
set -euo pipefail
. "$(dirname "$0")/result_line.sh"
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/distributed.jsonl}
build=${1:-build/release}
rounds=${2:-5}
mb=${3:-2.7}
out=$("$build/bench/bench_distributed" --staging "$rounds" "$mb")
echo "$out"
median() { sed -n "s/^median:.* $1 \([0-9.]*\).*/\1/p" <<<"$out"; }
rounds_of() { sed -n "s/^rounds $1 //p" <<<"$out" | tr ' ' ','; }
for k in read_old read_new trip_old trip_new all_reduce_old all_reduce_new all_gather_old all_gather_new; do
  if ! numbers "$(median "$k")"; then
    echo "the run printed no figure for $k; nothing written to $RESULTS_FILE" >&2
    exit 1
  fi
done
device=$(sed -n 's/^device //p' <<<"$out")
[ -n "${BENCH_MACHINE:-}" ] || BENCH_MACHINE="one $device, Vulkan"
# Copies kept on the compute queue are another configuration, not a newer figure of this one.
queue=
[ "${RUMUS_VULKAN_TRANSFER_QUEUE:-}" != 0 ] || queue=', "copies on": "the compute queue (RUMUS_VULKAN_TRANSFER_QUEUE=0)"'
about="One rank on one GPU moves an f32 device tensor through host memory and back, as a collective's staging does (src/distributed/staging.cpp). rumus: the staging copies, queued on the device's transfer queues (copies to the host on one, copies back on another where the device has two copy engines) behind the kernels that wrote the tensor and waited for alone, into persistent mapped host buffers that the exchange reads in place; an all_reduce of 2 MiB or more goes in pieces of 1 MiB, each copied back while the next ones still come to the host. Peer: the former path in the same run, DeviceBackend::read (a wait for the whole queue and a memcpy out of a staging block) and write (a memcpy into a staging block). GB/s: the tensor's bytes per call; a round trip and a collective stage them twice (device to host and back). The collectives run on a ThreadGroup of one rank with loopback: all_reduce's exchange leaves the mapped buffer in place; all_gather copies the tensor to the host straight into its block of the result buffer, so its exchange copies nothing for one rank, and the result returns as a new tensor. The peer emulates the former collectives: the read, the former exchange's host copies (two for all_reduce, one for all_gather), the write. Each figure: the median of 5 runs of 50 calls, each run ending with a wait for the device; median of the rounds."
for v in "device-to-host read:read" "round trip (to the host and back):trip" "all_reduce, 1 rank (loopback):all_reduce" \
         "all_gather, 1 rank (loopback):all_gather"; do
  name=${v%%:*} key=${v##*:}
  { printf '{"benchmark": "staging_vulkan", "config": {"what": %s, "MB": %s%s}, ' "$(json_str "$name")" "$mb" "$queue"
    printf '"value": %s, "unit": "GB/s", "peer": "former path: DeviceBackend::read + write", "peer_value": %s, ' \
      "$(median "${key}_new")" "$(median "${key}_old")"
    printf '"rounds": {"value": [%s], "peer_value": [%s]}, "about": %s, ' \
      "$(rounds_of "${key}_new")" "$(rounds_of "${key}_old")" "$(json_str "$about")"
    bench_tail "bench/staging.sh $build $rounds $mb"; } >>"$RESULTS_FILE"
done
# The pieces (Pieces in staging.cpp) against the same staging in one piece:
# the round trip is a one-rank all_reduce's copies without its exchange.
pieces=${RUMUS_STAGING_PIECE_KIB:-1024}
{ printf '{"benchmark": "staging_vulkan", "config": {"what": %s, "MB": %s%s}, ' \
    "$(json_str "all_reduce, 1 rank (loopback), in pieces of $pieces KiB")" "$mb" "$queue"
  printf '"value": %s, "unit": "GB/s", "peer": "the same copies in one piece (the round trip: to the host, waited for, and back)", "peer_value": %s, ' \
    "$(median all_reduce_new)" "$(median trip_new)"
  printf '"rounds": {"value": [%s], "peer_value": [%s]}, "about": %s, ' \
    "$(rounds_of all_reduce_new)" "$(rounds_of trip_new)" "$(json_str "$about")"
  bench_tail "bench/staging.sh $build $rounds $mb"; } >>"$RESULTS_FILE"
echo "appended 5 lines to $RESULTS_FILE; run bench/report to update docs/benchmarks.md" >&2
