#!/usr/bin/env bash
# Time the README's commands on a fresh clone of this repo: `make test` (and with
# MAIN=1 also the main job), install included. Usage: benchmarks/time_fresh_clone.sh
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
dest=$(mktemp -d /tmp/petals-fresh.XXXXXX)
git clone --quiet "$repo" "$dest/petals"
cd "$dest/petals"
start=$(date +%s)
make test
echo "fresh clone: make test took $(( $(date +%s) - start )) s (install included) in $dest/petals"
