#!/bin/bash
# How upstream.json was made: run upstream's own driver (prepare_node_alloc.sh, unmodified) on
# the local cluster (deploy/local-slurm/up) with recorder.sbatch as the workload, then keep what
# the recorder saw, with the run's own paths and ids replaced by placeholders (normalize.py).
#
#   UPSTREAM_SCRIPTS=/path/to/nvidia-resiliency-ext/src/nvidia_resiliency_ext/skills/nvrx-attr/scripts \
#   SHARED=/var/lib/nvrx-tests tests/data/upstream_env/record.sh > tests/data/upstream_env/upstream.json
#
# Only prepare_node_alloc.sh is taken from upstream (copied into a scratch scripts/ dir, next to
# this directory's workloads.conf, user.env and recorder.sbatch, as a site would lay them out).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${UPSTREAM_SCRIPTS:?set UPSTREAM_SCRIPTS to the upstream nvrx-attr/scripts directory}"
shared="${SHARED:-/var/lib/nvrx-tests}"
run="$(mktemp -d "$shared/upstream-env.XXXXXX")"
scripts="$run/scripts"
mkdir -p "$scripts/pools"
cp "$UPSTREAM_SCRIPTS/prepare_node_alloc.sh" "$scripts/"
cp "$here/recorder.sbatch" "$here/workloads.conf" "$here/user.env" "$scripts/"
cp "$here/pools/recorder.txt" "$scripts/pools/"
# The environment a user would have when starting the driver: its own variables only.
env -i PATH="$PATH" HOME="$run/home" USER="${USER:-root}" LANG=C.UTF-8 \
    WORKLOAD=recorder GPUS_PER_NODE=2 BATCH_SIZE=2 POLL_INTERVAL=1 \
    BASE_EXPERIMENTS_DIR="$run/experiments" \
    bash "$scripts/prepare_node_alloc.sh" >&2
python3 "$here/normalize.py" "$run/experiments" "$scripts"
rm -rf "$run"
