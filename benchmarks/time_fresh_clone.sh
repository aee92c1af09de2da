#!/usr/bin/env bash
# Time the README's two commands on a fresh clone of this repo, install included.
#   benchmarks/time_fresh_clone.sh              make test
#   MAIN=1 benchmarks/time_fresh_clone.sh       make train submit, in its steps (make install, make
#                                               fetch, then the rest of the job), then make test
#   MAIN=only benchmarks/time_fresh_clone.sh    the main job alone
#   COMPETITION=imdb MAIN=only ...              the main job of another competition
#   RUNS=3 TARGET=test-fast ...                 three fresh clones in a row, each timed on make test-fast
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
