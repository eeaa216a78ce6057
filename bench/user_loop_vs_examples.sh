#!/bin/sh
# A program of one's own against the example trainers: bench_user_loop (the
# examples' MLP and CNN written as a user would, SGD momentum, batch 64) and
# mnist_mlp / mnist_cnn with the same optimizer, every run with an empty
# environment (no OMP_*, no OPENBLAS_*), alternately so that noise hits both.
# Prints each run's samples/s and the ratio user loop / example, and appends
# each network's medians as one line to bench/results/cpu_training.jsonl
# (benchmark mnist_user_loop_cpu); run bench/report afterwards to update
# docs/benchmarks.md.
#
#   bench/user_loop_vs_examples.sh [ROUNDS]
#
# Environment: RUMUS_BUILD (default build/release), DATA (default /usr/share/datasets/fashion-mnist),
# RESULTS_FILE, BENCH_MACHINE.
set -eu
. "$(dirname "$0")/result_line.sh"
ROUNDS=${1:-3}
BUILD=${RUMUS_BUILD:-build/release}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/cpu_training.jsonl}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
clean() { env -i PATH=/usr/bin:/bin "$@"; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
written=0

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; batch 64; empty environment; $(date -u '+%Y-%m-%d %H:%M UTC')"
for model in mlp cnn; do
  if [ "$model" = mlp ]; then samples=30000; lr=0.05; bm=BM_MlpTrainStep; else samples=3200; lr=0.02; bm=BM_CnnTrainStep; fi
  : >"$TMP/ex" ; : >"$TMP/user" ; : >"$TMP/ratio"
  for round in $(seq "$ROUNDS"); do
    ex=$(clean "$BUILD/examples/mnist_$model" --data "$DATA" --epochs 1 --batch-size 64 --limit "$samples" \
      --optimizer sgd --nesterov 0 --lr "$lr" --schedule constant --weight-decay 0 \
      --save "$TMP/m.safetensors" --checkpoint "$TMP/c.safetensors" --metrics "$TMP/m.csv" 2>/dev/null |
      sed -n 's/^epoch 1: .*, \([0-9.]*\) samples\/s$/\1/p')
    user=$(clean "$BUILD/bench/bench_user_loop" --benchmark_filter="$bm" --benchmark_format=csv 2>/dev/null |
      awk -F, -v bm="$bm" 'index($1, bm) { for (i = 1; i <= NF; ++i) if (h[i] == "\"samples/s\"") print int($i) } NR == 1 || /^name/ { for (i = 1; i <= NF; ++i) h[i] = $i }')
    awk -v m="$model" -v r="$round" -v u="$user" -v e="$ex" \
      'BEGIN { printf "  %s round %s: user loop %s samples/s, example %s samples/s, ratio %.3fx\n", m, r, u, e, u / e }'
    if numbers "$ex" "$user"; then
      echo "$ex" >>"$TMP/ex"; echo "$user" >>"$TMP/user"
      awk -v u="$user" -v e="$ex" 'BEGIN { printf "%.3f\n", u / e }' >>"$TMP/ratio"
    fi
  done
  if [ "$(wc -l <"$TMP/ratio")" -eq "$ROUNDS" ]; then
    user=$(median <"$TMP/user"); ex=$(median <"$TMP/ex"); ratio=$(median <"$TMP/ratio")
    echo "$model: median of $ROUNDS rounds: user loop $user samples/s, example $ex samples/s; median per-round ratio ${ratio}x"
    { printf '{"benchmark": "mnist_user_loop_cpu", "config": {"model": "mnist_%s", "batch": 64}, ' "$model"
      printf '"value": %s, "unit": "samples/s", "peer": "rumus example trainer (mnist_mlp / mnist_cnn)", "peer_value": %s, "ratio": %s, ' "$user" "$ex" "$ratio"
      printf '"rounds": {"value": [%s], "peer_value": [%s], "ratio": [%s]}, ' "$(json_list "$TMP/user")" "$(json_list "$TMP/ex")" "$(json_list "$TMP/ratio")"
      bench_tail "bench/user_loop_vs_examples.sh $ROUNDS"; } >>"$RESULTS_FILE"
    written=$((written + 1))
  else
    echo "$model: a round printed no figure; nothing written to $RESULTS_FILE" >&2
  fi
done
[ "$written" -eq 0 ] || echo "appended $written line(s) to $RESULTS_FILE; run bench/report to update docs/benchmarks.md"
