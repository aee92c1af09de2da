#!/usr/bin/env bash
# Time the README's two commands on a fresh clone of this repo, install included.
#   benchmarks/time_fresh_clone.sh           make test
#   MAIN=1 benchmarks/time_fresh_clone.sh    make train submit (install timed apart: `make install`
#                                            first, then the job), then make test
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
dest=$(mktemp -d /tmp/petals-fresh.XXXXXX)
git clone --quiet "$repo" "$dest/petals"
cd "$dest/petals"
seconds() { local start=$(date +%s); "$@"; echo $(( $(date +%s) - start )); }
if [[ -n "${MAIN:-}" ]]; then
  install=$(seconds make install | tail -1)
  start=$(date +%s)
  make train submit
  job=$(( $(date +%s) - start ))
  echo "fresh clone: make install ${install} s; make train submit ${job} s (install excluded), $(( install + job )) s included"
  grep -h '"val_macro_f1"' runs/*/metrics.json | head -2
fi
start=$(date +%s)
make test
echo "fresh clone: make test took $(( $(date +%s) - start )) s in $dest/petals"
