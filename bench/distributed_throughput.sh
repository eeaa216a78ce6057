#!/bin/bash
# Training throughput of mnist_fsdp on the CPU: 1 rank against 2 ranks as
# threads (ThreadGroup) and as processes (mpirun), FSDP and DDP, in
# interleaved rounds (the machine's noise hits every variant alike). Prints a
# table of medians and appends each two-rank variant, against one rank, as a
# line to bench/results/distributed.jsonl (benchmark fsdp_cpu); run
# bench/report afterwards to update docs/benchmarks.md.
#   bench/distributed_throughput.sh [build dir] [rounds] [model] [limit]
# Environment: RESULTS_FILE, BENCH_MACHINE (bench/result_line.sh).
set -euo pipefail
. "$(dirname "$0")/result_line.sh"
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/distributed.jsonl}
build=${1:-build/release}
rounds=${2:-3}
model=${3:-mlp}
limit=${4:-12800}
bin=$build/examples/mnist_fsdp
export OMP_WAIT_POLICY=passive OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
rate() { grep -o '[0-9]* samples/s' | head -1 | cut -d' ' -f1; }
declare -A runs=(
  ["1 rank, fsdp"]="$bin --ranks 1 --mode fsdp"
  ["2 threads, fsdp"]="$bin --ranks 2 --mode fsdp"
  ["2 threads, ddp"]="$bin --ranks 2 --mode ddp"
  ["2 processes (mpirun), fsdp"]="${mpi[*]} $bin --mode fsdp"
  ["2 processes (mpirun), ddp"]="${mpi[*]} $bin --mode ddp"
)
order=("1 rank, fsdp" "2 threads, fsdp" "2 threads, ddp" "2 processes (mpirun), fsdp" "2 processes (mpirun), ddp")
declare -A results
for ((r = 1; r <= rounds; r++)); do
  for name in "${order[@]}"; do
    v=$(${runs[$name]} --model "$model" --limit "$limit" --epochs 1 | rate)
    results[$name]+="$v "
    echo "round $r: $name: $v samples/s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
done
echo "| $model, global batch 64 | samples/s per round | median |"
echo "| --- | --- | ---: |"
declare -A medians
for name in "${order[@]}"; do
  med=$(tr ' ' '\n' <<<"${results[$name]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  medians[$name]=$med
  echo "| $name | ${results[$name]} | $med |"
done
# One rank is the peer of every two-rank variant: the ratio is the speed-up.
one="1 rank, fsdp"
list() { tr ' ' '\n' <<<"$1" | grep . | paste -sd, -; }
written=0
for name in "${order[@]:1}"; do
  # shellcheck disable=SC2086
  if ! numbers ${results[$name]} ${results[$one]} "${medians[$name]}" "${medians[$one]}" ||
     [ "$(wc -w <<<"${results[$name]}")" -ne "$rounds" ] || [ "$(wc -w <<<"${results[$one]}")" -ne "$rounds" ]; then
    echo "$name: a round printed no figure; nothing written to $RESULTS_FILE" >&2
    continue
  fi
  { printf '{"benchmark": "fsdp_cpu", "config": {"model": %s, "ranks": %s, "mode": %s}, ' \
      "$(json_str "$model")" "$(json_str "${name%, *}")" "$(json_str "${name##*, }")"
    printf '"value": %s, "unit": "samples/s", "peer": %s, "peer_value": %s, ' "${medians[$name]}" "$(json_str "rumus, $one")" "${medians[$one]}"
    printf '"rounds": {"value": [%s], "peer_value": [%s]}, ' "$(list "${results[$name]}")" "$(list "${results[$one]}")"
    bench_tail "bench/distributed_throughput.sh $build $rounds $model $limit"; } >>"$RESULTS_FILE"
  written=$((written + 1))
done
[ "$written" -eq 0 ] || echo "appended $written line(s) to $RESULTS_FILE; run bench/report to update docs/benchmarks.md" >&2
