# Sourced by the benchmark drivers: the parts of a bench/results/*.jsonl line
# that describe the run (machine, commit, date) and JSON quoting. POSIX sh.
# The fields are described at the top of bench/report.
#
# Environment: BENCH_MACHINE replaces the machine's description (e.g.
# "2-core VM, Intel Xeon (AVX-512)", to match earlier lines of the same
# machine), RESULTS_FILE the file the driver appends to (/dev/null: none).

# A JSON string; the texts quoted here come from /proc/cpuinfo, dpkg and the
# drivers themselves, so backslashes and double quotes are all there is to escape.
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# The numbers of a file, one a line, as the inside of a JSON array.
json_list() { paste -sd, "$1"; }

# Succeeds if every argument is a plain decimal number, so that a run that
# printed nothing does not write a broken line.
numbers() {
  for n in "$@"; do
    case $n in '' | *[!0-9.]* | *.*.*) return 1 ;; esac
  done
}

bench_machine() {
  if [ -n "${BENCH_MACHINE:-}" ]; then json_str "$BENCH_MACHINE"; return; fi
  json_str "$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1), $(nproc) cores"
}

bench_commit() {
  c=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null) && json_str "$c" || printf null
}

bench_date() { json_str "$(date -u +%F)"; }

# The ISA the CPU libraries may use: what ONEDNN_MAX_CPU_ISA caps them to,
# else the best the CPU has.
bench_isa() {
  case ${ONEDNN_MAX_CPU_ISA:-${DNNL_MAX_CPU_ISA:-}} in
    AVX512* | avx512*) echo AVX-512 ;;
    AVX2* | avx2*) echo AVX2 ;;
    ?*) echo "${ONEDNN_MAX_CPU_ISA:-$DNNL_MAX_CPU_ISA}" ;;
    *) if grep -q avx512f /proc/cpuinfo; then echo AVX-512
       elif grep -q avx2 /proc/cpuinfo; then echo AVX2
       else echo baseline; fi ;;
  esac
}

# The closing fields of a line: machine, commit, date and the command run.
bench_tail() {
  printf '"machine": %s, "commit": %s, "date": %s, "command": %s}\n' \
    "$(bench_machine)" "$(bench_commit)" "$(bench_date)" "$(json_str "$1")"
}
