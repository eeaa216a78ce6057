#!/bin/bash
# Training throughput of mnist_fsdp on the CPU: 1 rank against 2 ranks as
# threads (ThreadGroup) and as processes (mpirun), FSDP and DDP, in
# interleaved rounds (the machine's noise hits every variant alike).
#   bench/distributed_throughput.sh [build dir] [rounds] [model] [limit]
set -euo pipefail
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
for name in "${order[@]}"; do
  med=$(tr ' ' '\n' <<<"${results[$name]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| $name | ${results[$name]} | $med |"
done
