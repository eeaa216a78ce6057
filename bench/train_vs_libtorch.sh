#!/bin/sh
# Training throughput of rumus's mnist_mlp / mnist_cnn against libtorch_baseline
# (the libtorch reference trainer of the design notes' baselines/: same nets, batch 64, SGD momentum), run
# alternately on the same machine so that noise hits both; prints the median
# samples/s of each and their ratio.
#
#   bench/train_vs_libtorch.sh [ROUNDS] [THREADS]
#
# Environment: RUMUS_BUILD (default build/release), LIBTORCH_BASELINE (default
# /tmp/lt/libtorch_baseline), DATA (default /usr/share/datasets/fashion-mnist),
# MODELS (default "mlp cnn").
#
# Both programs run with OMP_WAIT_POLICY=passive and OPENBLAS_CORETYPE set for
# the CPU (unless the environment sets them). Without the first, idle OpenMP
# threads spin and starve the working ones on small machines, in both
# programs alike (see RESULTS.md and docs/devices.md, "Threads").
set -eu
ROUNDS=${1:-3}
THREADS=${2:-2}
BUILD=${RUMUS_BUILD:-build/release}
BASELINE=${LIBTORCH_BASELINE:-/tmp/lt/libtorch_baseline}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
MODELS=${MODELS:-mlp cnn}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for exe in "$BUILD/examples/mnist_mlp" "$BUILD/examples/mnist_cnn" "$BASELINE"; do
  [ -x "$exe" ] || { echo "missing $exe (build it first; see bench/RESULTS.md)" >&2; exit 1; }
done

export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; batch 64; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "env: OMP_WAIT_POLICY=$OMP_WAIT_POLICY OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}"
for model in $MODELS; do
  if [ "$model" = mlp ]; then samples=60000; lr=0.05; else samples=6400; lr=0.02; fi
  : >"$TMP/lt" ; : >"$TMP/ru" ; : >"$TMP/ratio"
  for round in $(seq "$ROUNDS"); do
    "$BASELINE" "$model" "$DATA" "$THREADS" 1 "$samples" |
      sed -n 's/.*: \([0-9.]*\) train samples\/s.*/\1/p' >>"$TMP/lt"
    "$BUILD/examples/mnist_$model" --data "$DATA" --threads "$THREADS" --epochs 1 --batch-size 64 --limit "$samples" \
      --optimizer sgd --nesterov 0 --lr "$lr" --schedule constant --weight-decay 0 \
      --save "$TMP/m.safetensors" --checkpoint "$TMP/c.safetensors" --metrics "$TMP/m.csv" 2>/dev/null |
      sed -n 's/^epoch 1: .*, \([0-9.]*\) samples\/s$/\1/p' >>"$TMP/ru"
    awk -v a="$(tail -1 "$TMP/ru")" -v b="$(tail -1 "$TMP/lt")" 'BEGIN {printf "%.3f\n", a / b}' >>"$TMP/ratio"
    echo "  $model round $round: libtorch $(tail -1 "$TMP/lt") samples/s, rumus $(tail -1 "$TMP/ru") samples/s, ratio $(tail -1 "$TMP/ratio")x"
  done
  lt=$(median <"$TMP/lt"); ru=$(median <"$TMP/ru")
  # Rounds run back to back, so the per-round ratio is the robust figure on a noisy machine.
  echo "$model: median of $ROUNDS rounds: libtorch $lt samples/s, rumus $ru samples/s; median per-round ratio $(median <"$TMP/ratio")x"
done
