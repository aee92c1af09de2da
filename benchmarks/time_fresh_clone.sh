#!/usr/bin/env bash
# Time the README's two commands on a fresh clone of this repo, install included.
#   benchmarks/time_fresh_clone.sh              make test
#   MAIN=1 benchmarks/time_fresh_clone.sh       make train submit, in its steps (make install, make
#                                               fetch, then the rest of the job), then make test
#   MAIN=only benchmarks/time_fresh_clone.sh    the main job alone
#   COMPETITION=imdb MAIN=only ...              the main job of another competition
#   RUNS=3 TARGET=test-fast ...                 three fresh clones in a row, each timed on make test-fast
#   PAIRS=2 benchmarks/time_fresh_clone.sh      issue 43's ratio: install and fetch once, then twice
#                                               `make train submit` and `make train submit FOLDS=5`
#                                               back to back (runs and submissions cleared before each)
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
dest=$(mktemp -d /tmp/petals-fresh.XXXXXX)
git clone --quiet "$repo" "$dest/petals"
cd "$dest/petals"
steps=()
timed() { local name=$1 start=$(date +%s); shift; "$@"; steps+=("$name $(( $(date +%s) - start )) s"); }
if [[ -n "${MAIN:-}" ]]; then
  start=$(date +%s)
  competition=${COMPETITION:-flowers}
  timed "make install" make install
  timed "make fetch" make fetch COMPETITION="$competition"
  timed "make train submit (data fetched)" make train submit COMPETITION="$competition"
  echo "fresh clone at $(git rev-parse --short HEAD): make train submit COMPETITION=$competition" \
    "$(( $(date +%s) - start )) s in all"
  printf '  %s\n' "${steps[@]}"
  grep -h -A1 '"metric"\|"val_macro_f1"' runs/*/metrics.json | head -4
  [[ "$MAIN" == only ]] && exit 0
fi
if [[ -n "${PAIRS:-}" ]]; then
  # No credentials: each `submit` is its dry run, never an upload.
  export KAGGLE_USERNAME="" KAGGLE_KEY="" KAGGLE_API_TOKEN="" KAGGLE_CONFIG_DIR="$dest/no-kaggle"
  make install >/dev/null && make fetch >/dev/null
  timed_job() {  # name, make arguments...: wall and CPU seconds (user + system) into $dest/<name>.time
    local name=$1; shift
    rm -rf runs submissions
    /usr/bin/time -f "%e %U %S" -o "$dest/$name.time" make "$@" >"$dest/$name.log" 2>&1 ||
      { tail -20 "$dest/$name.log"; echo "make $* failed: $dest/$name.log"; exit 1; }
  }
  for pair in $(seq "$PAIRS"); do
    # Wall seconds, and CPU seconds: on a shared virtual machine the wall clock moves with the
    # neighbours (the same cache pass ran at 68-120 examples/s here), CPU time less. Each pair
    # after the first runs the two in the other order, so neither always goes first after fetch.
    if (( pair % 2 )); then
      timed_job "single-$pair" train submit; timed_job "folds-$pair" train submit FOLDS=5
    else
      timed_job "folds-$pair" train submit FOLDS=5; timed_job "single-$pair" train submit
    fi
    python3 - "$dest/single-$pair.time" "$dest/folds-$pair.time" "$pair" "$(git rev-parse --short HEAD)" <<'PY'
import sys
(wall1, *cpu1), (wall2, *cpu2) = ([float(x) for x in open(f).read().split()[-3:]] for f in sys.argv[1:3])
print(f"pair {sys.argv[3]} at {sys.argv[4]}: make train submit {wall1:.0f} s wall / {sum(cpu1):.0f} s CPU, "
      f"FOLDS=5 {wall2:.0f} s / {sum(cpu2):.0f} s: {wall2 / wall1:.2f}x wall, {sum(cpu2) / sum(cpu1):.2f}x CPU")
PY
    grep -h -m1 "examples (TTA" "$dest/single-$pair.log" || true
    grep -h -m1 "CV macro-F1" "$dest/folds-$pair.log" || true
  done
  echo "logs in $dest"
  exit 0
fi
# RUNS=3: that many fresh clones in a row, each installed, then timed on TARGET (make test, or
# test-fast); each run's pytest summary and seconds are printed, and the command fails if one does.
target=${TARGET:-test}
for run in $(seq "${RUNS:-1}"); do
  if (( run > 1 )); then
    dest=$(mktemp -d /tmp/petals-fresh.XXXXXX)
    git clone --quiet "$repo" "$dest/petals"
    cd "$dest/petals"
  fi
  make install >/dev/null
  start=$(date +%s)
  make "$target" 2>&1 | tee "$dest/make-$target.log" | tail -3
  status=${PIPESTATUS[0]}
  summary=$(grep -E "^=+ .*(passed|failed).* =+$" "$dest/make-$target.log" | tail -1 | tr -d '=')
  echo "fresh clone $run of ${RUNS:-1} at $(git rev-parse --short HEAD): make $target took" \
    "$(( $(date +%s) - start )) s:$summary (exit $status) in $dest/petals"
  (( status == 0 )) || exit "$status"
done
