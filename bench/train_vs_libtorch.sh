#!/bin/sh
# Training throughput of rumus's mnist_mlp / mnist_cnn against libtorch_baseline
# (the libtorch reference trainer of the design notes' baselines/: same nets, batch 64, SGD momentum), run
# alternately on the same machine so that noise hits both; prints the median
# samples/s of each and their ratio, and appends each network's result as one
# line to bench/results/cpu_training.jsonl (benchmark mnist_cpu); run
# bench/report afterwards to update docs/benchmarks.md.
#
#   bench/train_vs_libtorch.sh [ROUNDS] [THREADS]
#
# Environment: RUMUS_BUILD (default build/release), LIBTORCH_BASELINE (default
# /tmp/lt/libtorch_baseline), DATA (default /usr/share/datasets/fashion-mnist),
# MODELS (default "mlp cnn"), RESULTS_FILE, BENCH_MACHINE and BENCH_PEER (the
# peer's name; default libtorch's Debian package version and the OS).
#
# The baseline and the examples, on Debian 12:
#   apt-get install -y libtorch-dev python3-torch libopenblas0-pthread
#   cmake -S baselines/libtorch -B /tmp/lt -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/lt -j2
#   cmake --preset release && cmake --build --preset release --target mnist_mlp mnist_cnn
#
# Both programs run with OMP_WAIT_POLICY=passive and OPENBLAS_CORETYPE set for
# the CPU (unless the environment sets them). Without the first, idle OpenMP
# threads spin and starve the working ones on small machines, in both
# programs alike (see docs/devices.md, "Threads").
set -eu
. "$(dirname "$0")/result_line.sh"
ROUNDS=${1:-3}
THREADS=${2:-2}
BUILD=${RUMUS_BUILD:-build/release}
BASELINE=${LIBTORCH_BASELINE:-/tmp/lt/libtorch_baseline}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
MODELS=${MODELS:-mlp cnn}
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/cpu_training.jsonl}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for exe in "$BUILD/examples/mnist_mlp" "$BUILD/examples/mnist_cnn" "$BASELINE"; do
  [ -x "$exe" ] || { echo "missing $exe (build it first; see the top of $0)" >&2; exit 1; }
done

export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

libtorch_peer() {
  v=$(dpkg-query -W -f '${Version}' libtorch-dev 2>/dev/null | sed 's/[+~-].*//') || v=
  os=$(. /etc/os-release 2>/dev/null && echo "${NAME%% *} ${VERSION_ID:-}") || os=
  echo "libtorch${v:+ $v}${os:+ ($os)}"
}
PEER=${BENCH_PEER:-$(libtorch_peer)}
ISA=$(bench_isa)
written=0

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; batch 64; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "env: OMP_WAIT_POLICY=$OMP_WAIT_POLICY OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}; ISA $ISA; peer $PEER"
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
  lt=$(median <"$TMP/lt"); ru=$(median <"$TMP/ru"); ratio=$(median <"$TMP/ratio")
  # Rounds run back to back, so the per-round ratio is the robust figure on a noisy machine.
  echo "$model: median of $ROUNDS rounds: libtorch $lt samples/s, rumus $ru samples/s; median per-round ratio ${ratio}x"
  if numbers "$lt" "$ru" "$ratio" $(cat "$TMP/lt" "$TMP/ru") && [ "$(wc -l <"$TMP/ru")" -eq "$ROUNDS" ] && [ "$(wc -l <"$TMP/lt")" -eq "$ROUNDS" ]; then
    { printf '{"benchmark": "mnist_cpu", "config": {"model": "mnist_%s", "batch": 64, "threads": %s, "isa": %s}, ' "$model" "$THREADS" "$(json_str "$ISA")"
      printf '"value": %s, "unit": "samples/s", "peer": %s, "peer_value": %s, "ratio": %s, ' "$ru" "$(json_str "$PEER")" "$lt" "$ratio"
      printf '"rounds": {"value": [%s], "peer_value": [%s], "ratio": [%s]}, ' "$(json_list "$TMP/ru")" "$(json_list "$TMP/lt")" "$(json_list "$TMP/ratio")"
      bench_tail "bench/train_vs_libtorch.sh $ROUNDS $THREADS"; } >>"$RESULTS_FILE"
    written=$((written + 1))
  else
    echo "$model: a round printed no figure; nothing written to $RESULTS_FILE" >&2
  fi
done
[ "$written" -eq 0 ] || echo "appended $written line(s) to $RESULTS_FILE; run bench/report to update docs/benchmarks.md"
