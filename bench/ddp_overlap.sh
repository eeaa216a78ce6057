#!/bin/bash
# How much of DDP's gradient all-reduce hides behind backward: runs
# `bench_distributed --ddp-overlap` (2 thread ranks, every bucket's
# collective delayed on the communication thread as a slow link would) and
# appends one line per measured step time to bench/results/distributed.jsonl
# (benchmark ddp_overlap): compute only, communication only, reduced after
# backward, and overlapped (plain, with find_unused_parameters, and the
# backward after no_sync), each against max(compute, communication), the
# ideal; run bench/report afterwards to update docs/benchmarks.md.
#   bench/ddp_overlap.sh [build dir] [rounds] [delay ms per bucket]
# Environment: RESULTS_FILE, BENCH_MACHINE (bench/result_line.sh).
set -euo pipefail
. "$(dirname "$0")/result_line.sh"
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/distributed.jsonl}
build=${1:-build/release}
rounds=${2:-3}
delay=${3:-2}
out=$("$build/bench/bench_distributed" --ddp-overlap "$rounds" "$delay")
echo "$out"
field() { sed -n "s/^median:.* $1 \([0-9.]*\) ms.*/\1/p" <<<"$out"; }
compute=$(field compute) comm=$(field communication) after=$(sed -n 's/^median:.*after backward \([0-9.]*\) ms.*/\1/p' <<<"$out")
over=$(field overlapped) unused=$(field find_unused) no_sync=$(field after_no_sync)
fraction=$(sed -n 's/^overlap fraction \([0-9.-]*\).*/\1/p' <<<"$out")
fraction_unused=$(sed -n 's/^overlap fraction.* find_unused \([0-9.-]*\).*/\1/p' <<<"$out")
fraction_no_sync=$(sed -n 's/^overlap fraction.* after_no_sync \([0-9.-]*\).*/\1/p' <<<"$out")
if ! numbers "$compute" "$comm" "$after" "$over" "$unused" "$no_sync"; then
  echo "the run printed no figures; nothing written to $RESULTS_FILE" >&2
  exit 1
fi
ideal=$(awk -v a="$compute" -v b="$comm" 'BEGIN { printf "%.2f", (a > b) ? a : b }')
rounds_of() { sed -n "s/^rounds $1 //p" <<<"$out" | tr ' ' ','; }
about="DistributedDataParallel on 2 thread ranks (ThreadGroup), 8 Linear(512, 512) + relu layers, batch 128 per rank, one bucket per layer; every bucket's all-reduce first sleeps the set delay on the communication thread (ThreadGroupOptions::collective_delay), as a slow link would take. Step times, rank 0's median over 15 steps, median of the rounds: compute only (forward + backward, no reduction), communication only (the 8 bucket all-reduces), reduced after backward (their sum, in sequence), overlapped (DDP: buckets all-reduced from gradient-ready hooks while backward runs), the same with find_unused_parameters (every parameter used; the bitmap of used parameters is one more all-reduce, delayed too, after the buckets), and the backward after no_sync (one backward under no_sync before the timed step, which then carries the sum of both passes' gradients in its buckets). The peer is the ideal max(compute, communication); the forward pass cannot overlap its own step's communication, so the reachable bound is forward + max(backward, communication). The communication threads' host reductions share the 2 cores with the computing ranks."
note="overlap fraction ${fraction} (find_unused_parameters ${fraction_unused}, after no_sync ${fraction_no_sync}) = (compute + communication - step) / min(compute, communication); 1 when the step takes max(compute, communication), 0 when it takes their sum"
for v in "compute only:compute" "communication only:communication" "reduced after backward:after_backward" \
         "overlapped with backward (DDP):overlapped" "overlapped, find_unused_parameters (DDP):find_unused" \
         "overlapped, the backward after no_sync (DDP):after_no_sync"; do
  name=${v%%:*} key=${v##*:}
  case $key in
    compute) value=$compute ;; communication) value=$comm ;; after_backward) value=$after ;;
    find_unused) value=$unused ;; after_no_sync) value=$no_sync ;; *) value=$over ;;
  esac
  { printf '{"benchmark": "ddp_overlap", "config": {"step": %s, "ranks": "2 threads", "buckets": 8, "delay per bucket (ms)": %s}, ' \
      "$(json_str "$name")" "$delay"
    printf '"value": %s, "unit": "ms/step", "higher_is_better": false, "peer": "max(compute, communication)", "peer_value": %s, ' "$value" "$ideal"
    printf '"rounds": {"value": [%s]}, "note": %s, "about": %s, ' "$(rounds_of "$key")" "$(json_str "$note")" "$(json_str "$about")"
    bench_tail "bench/ddp_overlap.sh $build $rounds $delay"; } >>"$RESULTS_FILE"
done
echo "appended 6 lines to $RESULTS_FILE; run bench/report to update docs/benchmarks.md" >&2
