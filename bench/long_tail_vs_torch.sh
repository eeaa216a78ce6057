#!/bin/sh
# The long-tail ops (sort and topk of 1M f32, cumsum and logsumexp over rows,
# an embedding-bag-like gather and scatter_add) of rumus against PyTorch in
# one run: bench_long_tail and bench/long_tail_torch.py alternate, ROUNDS
# times per device (which of the two goes first alternates too); each run
# prints every case's median time. Prints the median of the rounds and of
# the per-round ratios (PyTorch's time / rumus's: above 1 rumus is faster),
# and appends one line per device and case to bench/results/long_tail.jsonl
# (benchmark long_tail); run bench/report afterwards to update docs/benchmarks.md.
#
#   bench/long_tail_vs_torch.sh [ROUNDS (default 3)] [THREADS (default: every core)]
#
# Environment:
#   DEVICES       rumus's devices, default "cpu"; "cpu vulkan:0" on a GPU machine.
#                 The CPU runs against PyTorch on the CPU (THREADS threads each),
#                 a Vulkan device against PyTorch on TORCH_GPU.
#   TORCH_GPU     PyTorch's device for the Vulkan rounds (default cuda)
#   REPS          timed calls per case and run (default 20)
#   PYTHON        the Python with torch (default python3)
#   RUMUS_BUILD   default build/release (cmake --build --preset release --target bench_long_tail)
#   BENCH_GPU_MACHINE  the machine of the Vulkan lines (default "one <GPU name>, Vulkan" from nvidia-smi)
#   RESULTS_FILE, BENCH_MACHINE (bench/result_line.sh)
#
# Both programs run with OMP_WAIT_POLICY=passive unless the environment sets
# it: idle OpenMP threads that spin starve the working ones on small machines.
set -eu
. "$(dirname "$0")/result_line.sh"
ROUNDS=${1:-3}
THREADS=${2:-$(nproc)}
DEVICES=${DEVICES:-cpu}
TORCH_GPU=${TORCH_GPU:-cuda}
REPS=${REPS:-20}
PYTHON=${PYTHON:-python3}
BUILD=${RUMUS_BUILD:-build/release}
RESULTS_FILE=${RESULTS_FILE:-$(dirname "$0")/results/long_tail.jsonl}
BENCH=$BUILD/bench/bench_long_tail
TWIN=$(dirname "$0")/long_tail_torch.py
CASES="sort topk cumsum gather scatter_add logsumexp"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

[ -x "$BENCH" ] || { echo "missing $BENCH (build it first: cmake --build --preset release --target bench_long_tail)" >&2; exit 1; }
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
torch_version=$("$PYTHON" -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))')
about="\`bench_long_tail --device DEVICE --reps 20 --threads T\` against \`bench/long_tail_torch.py\` (the same ops on the same shapes) in the same run, alternating (\`bench/long_tail_vs_torch.sh\`); each figure is the median of 20 calls after 3 warm-up ones, each call timed until the device has finished (torch.cuda.synchronize on CUDA), then the median over the rounds; ms per call, lower is better. The CPU runs both with the same thread count. rumus's sort is always stable; PyTorch's is measured with its default (stable = False)."
written=0

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; $(date -u '+%Y-%m-%d %H:%M UTC')"
for dev in $DEVICES; do
  case $dev in
    cpu) tdev=cpu; peer="PyTorch $torch_version CPU" ;;
    *) tdev=$TORCH_GPU; peer="PyTorch $torch_version CUDA" ;;
  esac
  for round in $(seq "$ROUNDS"); do
    run_rumus() { "$BENCH" --device "$dev" --reps "$REPS" --threads "$THREADS" >"$TMP/ru.out"; }
    run_torch() { "$PYTHON" "$TWIN" "$tdev" "$REPS" "$THREADS" >"$TMP/pt.out"; }
    if [ $((round % 2)) -eq 1 ]; then run_rumus; run_torch; else run_torch; run_rumus; fi
    cat "$TMP/ru.out" "$TMP/pt.out"
    for c in $CASES; do
      ru=$(sed -n "s/^rumus [^ ]* $c: \([0-9.]*\) ms.*/\1/p" "$TMP/ru.out")
      pt=$(sed -n "s/^torch [^ ]* [^ ]* $c: \([0-9.]*\) ms.*/\1/p" "$TMP/pt.out")
      sed -n "s/^rumus [^ ]* $c: .*min [0-9.]*; \([^;)]*\).*/\1/p" "$TMP/ru.out" >"$TMP/$c.what"
      echo "$ru" >>"$TMP/$dev.$c.ru"
      echo "$pt" >>"$TMP/$dev.$c.pt"
      if numbers "$ru" "$pt"; then
        awk -v a="$ru" -v b="$pt" 'BEGIN {printf "%.3f\n", b / a}' >>"$TMP/$dev.$c.ratio"
      fi
    done
  done
  if [ "$dev" = cpu ]; then
    machine=$(bench_machine)
    config_threads=", \"threads\": $THREADS"
  else
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) || gpu=
    machine=$(json_str "${BENCH_GPU_MACHINE:-one ${gpu:-GPU}, Vulkan}")
    config_threads=
  fi
  for c in $CASES; do
    ru=$(median <"$TMP/$dev.$c.ru"); pt=$(median <"$TMP/$dev.$c.pt")
    ratio=$( [ -s "$TMP/$dev.$c.ratio" ] && median <"$TMP/$dev.$c.ratio" || echo)
    echo "$dev $c: median of $ROUNDS rounds: rumus $ru ms, PyTorch $pt ms; median per-round ratio ${ratio}x"
    if numbers "$ru" "$pt" "$ratio" $(cat "$TMP/$dev.$c.ru" "$TMP/$dev.$c.pt") &&
       [ "$(wc -l <"$TMP/$dev.$c.ratio")" -eq "$ROUNDS" ]; then
      { printf '{"benchmark": "long_tail", "config": {"device": %s, "op": %s, "shape": %s%s}, ' \
          "$(json_str "$dev")" "$(json_str "$c")" "$(json_str "$(cat "$TMP/$c.what")")" "$config_threads"
        printf '"value": %s, "unit": "ms", "higher_is_better": false, "peer": %s, "peer_value": %s, "ratio": %s, ' \
          "$ru" "$(json_str "$peer")" "$pt" "$ratio"
        printf '"rounds": {"value": [%s], "peer_value": [%s], "ratio": [%s]}, "about": %s, ' \
          "$(json_list "$TMP/$dev.$c.ru")" "$(json_list "$TMP/$dev.$c.pt")" "$(json_list "$TMP/$dev.$c.ratio")" \
          "$(json_str "$about")"
        printf '"machine": %s, "commit": %s, "date": %s, "command": %s}\n' "$machine" "$(bench_commit)" \
          "$(bench_date)" "$(json_str "DEVICES=\"$DEVICES\" bench/long_tail_vs_torch.sh $ROUNDS $THREADS")"
      } >>"$RESULTS_FILE"
      written=$((written + 1))
    else
      echo "$dev $c: a round printed no figure; nothing written for it" >&2
    fi
  done
done
[ "$written" -eq 0 ] || echo "appended $written line(s) to $RESULTS_FILE; run bench/report to update docs/benchmarks.md"
