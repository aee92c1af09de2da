#!/usr/bin/env bash
# Time the README's two commands on a fresh clone of this repo, install included.
#   benchmarks/time_fresh_clone.sh              make test
#   MAIN=1 benchmarks/time_fresh_clone.sh       make train submit, in its steps (make install, make
#                                               fetch, then the rest of the job), then make test
#   MAIN=only benchmarks/time_fresh_clone.sh    the main job alone
#   COMPETITION=imdb MAIN=only ...              the main job of another competition
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
start=$(date +%s)
make test
echo "fresh clone: make test took $(( $(date +%s) - start )) s in $dest/petals"
