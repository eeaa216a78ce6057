#!/bin/sh
# A program of one's own against the example trainers: bench_user_loop (the
# examples' MLP and CNN written as a user would, SGD momentum, batch 64) and
# mnist_mlp / mnist_cnn with the same optimizer, every run with an empty
# environment (no OMP_*, no OPENBLAS_*), alternately so that noise hits both.
# Prints each run's samples/s and the ratio user loop / example.
#
#   bench/user_loop_vs_examples.sh [ROUNDS]
#
# Environment: RUMUS_BUILD (default build/release), DATA (default /usr/share/datasets/fashion-mnist).
set -eu
ROUNDS=${1:-3}
BUILD=${RUMUS_BUILD:-build/release}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
clean() { env -i PATH=/usr/bin:/bin "$@"; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; batch 64; empty environment; $(date -u '+%Y-%m-%d %H:%M UTC')"
for model in mlp cnn; do
  if [ "$model" = mlp ]; then samples=30000; lr=0.05; bm=BM_MlpTrainStep; else samples=3200; lr=0.02; bm=BM_CnnTrainStep; fi
  for round in $(seq "$ROUNDS"); do
    ex=$(clean "$BUILD/examples/mnist_$model" --data "$DATA" --epochs 1 --batch-size 64 --limit "$samples" \
      --optimizer sgd --nesterov 0 --lr "$lr" --schedule constant --weight-decay 0 \
      --save "$TMP/m.safetensors" --checkpoint "$TMP/c.safetensors" --metrics "$TMP/m.csv" 2>/dev/null |
      sed -n 's/^epoch 1: .*, \([0-9.]*\) samples\/s$/\1/p')
    user=$(clean "$BUILD/bench/bench_user_loop" --benchmark_filter="$bm" --benchmark_format=csv 2>/dev/null |
      awk -F, -v bm="$bm" 'index($1, bm) { for (i = 1; i <= NF; ++i) if (h[i] == "\"samples/s\"") print int($i) } NR == 1 || /^name/ { for (i = 1; i <= NF; ++i) h[i] = $i }')
    awk -v m="$model" -v r="$round" -v u="$user" -v e="$ex" \
      'BEGIN { printf "  %s round %s: user loop %s samples/s, example %s samples/s, ratio %.3fx\n", m, r, u, e, u / e }'
  done
done
