# Shared by the benches (sourced, not run; bench/lib/fleet.sh sources it too): the binary measured
# and the median of repeated runs.

# bench_binary: sets `bin` to the binary measured: KEADM_BATCH=/path/to/keadm-batch (a
# release build) when given, else the release build of this checkout, built here.
bench_binary() {
  if [ -n "${KEADM_BATCH:-}" ]; then
    bin=$(realpath "$KEADM_BATCH")
  else
    cargo build --release --quiet
    bin="$PWD/target/release/keadm-batch"
  fi
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2] + a[NR/2+1]) / 2}'; }

# time_runs RUNS COMMAND...: the median wall time of RUNS runs of COMMAND, in seconds. Its
# output is dropped and its exit status ignored (a baseline may exit 1 by design).
time_runs() {
  local runs=$1 start end
  shift
  for _ in $(seq "$runs"); do
    start=$(date +%s.%N)
    "$@" > /dev/null 2>&1 || true
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
  done | median
}
