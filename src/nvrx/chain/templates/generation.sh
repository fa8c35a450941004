# ---------------------------------------------------------------------------------------------
# One generation of an nvrx singleton job-array chain (docs/submit-chain.md).
# The settings above were rendered by `nvrx submit-chain`; everything below is fixed.
#
# Array task 0 is a training rank and the rendezvous host. It arms its EXIT trap first, then
# publishes the host name; every task waits for it behind a gate that checks rdzv_closed before
# rdzv_host. The trap closes the gate, cancels the rest of THIS chain when the launcher asked for
# no restart, and always cancels its own generation last, so the next generation can start.
# ---------------------------------------------------------------------------------------------
set -uo pipefail

NVRX_JOB_ID=${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}
NVRX_TASK=${SLURM_ARRAY_TASK_ID:-0}
# Per generation on purpose: a stale rdzv_closed or rdzv_host of the previous generation must
# never be visible to the next one.
NVRX_JOB_DIR=$NVRX_WORK_DIR/nvrx/$NVRX_JOB_ID
NVRX_CONTROL=$NVRX_JOB_DIR/control
NVRX_DRAIN_DIR=$NVRX_JOB_DIR/drain
export NVRX_CONTROL NVRX_NO_RESTART_EXIT_CODE

log() { printf '[nvrx %s task %s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$NVRX_TASK" "$*"; }
# >>> one-host rehearsal

# ONE-HOST REHEARSAL (chain.one_host_rehearsal): every node of this cluster is one host (as on
# deploy/local-slurm's), so the launchers of all tasks share its addresses, ports and temp dir.
# The blocks between the one-host rehearsal's markers make that work: the rendezvous at 127.0.0.1,
# NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE=1 (NVRx refuses two launchers on one host otherwise),
# is_host on task 0's first node only, this generation's own rendezvous and log-server ports,
# and a short temp dir per task (the launcher's Unix sockets live there), removed when the task
# ends. A real cluster, one launcher per node, needs none of it.
one_host_tmp=
# shellcheck disable=SC2317 # runs from the EXIT trap
one_host_cleanup() { if [ -n "$one_host_tmp" ]; then rm -rf -- "$one_host_tmp"; fi; }
# <<< one-host rehearsal

# shellcheck disable=SC2317 # cancel_chain and teardown run from the EXIT trap
# The rest of this chain: queued generations whose comment starts with this chain's id. Never by
# job name alone, which another chain of the same user may share.
cancel_chain() {
    local attempt listing
    local -a ids
    for attempt in 1 2 3; do
        if listing=$(nvrx_slurm squeue -h -r -u "$SLURM_JOB_USER" -n "$SLURM_JOB_NAME" -o '%F|%k'); then
            mapfile -t ids < <(printf '%s\n' "$listing" | awk -F'|' \
                -v tag="nvrx-chain=$NVRX_CHAIN_ID " -v self="$NVRX_JOB_ID" \
                'index($2, tag) == 1 && $1 != self { print $1 }' | sort -u)
            if [ "${#ids[@]}" -eq 0 ]; then
                log "no other generation of chain $NVRX_CHAIN_ID is queued"
                return 0
            fi
            if nvrx_slurm scancel "${ids[@]}"; then
                log "cancelled the rest of chain $NVRX_CHAIN_ID: ${ids[*]}"
                return 0
            fi
        fi
        sleep "$attempt"
    done
    log "WARNING: could not cancel the rest of chain $NVRX_CHAIN_ID; run: nvrx submit-chain --cancel --work-dir $NVRX_WORK_DIR"
    return 1
}

# shellcheck disable=SC2317
teardown() {
    local rc=$?
    if [ -n "$drain_pid" ]; then kill "$drain_pid" 2>/dev/null; fi
    # Closed even when the control dir is refused: the peers then leave with the cancel below.
    if nvrx_mkdir "$NVRX_CONTROL" "the gate stays open until the generation is cancelled"; then
        nvrx_flag "$NVRX_CONTROL/rdzv_closed" ||
            log "WARNING: cannot write $NVRX_CONTROL/rdzv_closed; the gate stays open until the generation is cancelled"
    fi
    # 93 can reach task 0 as 143 when a peer's exit tears the step down: the flag file, written
    # by whichever node's launcher exited with the verdict, carries it reliably.
    if [ -e "$NVRX_CONTROL/no_restart" ] || [ "$rc" -eq "$NVRX_NO_RESTART_EXIT_CODE" ]; then
        log "Exit $NVRX_NO_RESTART_EXIT_CODE: NVRx requested no restart. Cancelling queued generations of chain $NVRX_CHAIN_ID ($SLURM_JOB_NAME)."
        cancel_chain
    fi
    # >>> one-host rehearsal
    one_host_cleanup
    # <<< one-host rehearsal
    log "generation $NVRX_JOB_ID ends (rc=$rc); cancelling its remaining tasks"
    local attempt
    for attempt in 1 2 3; do
        nvrx_slurm scancel "$NVRX_JOB_ID" && exit "$rc"
        sleep "$attempt"
    done
    log "WARNING: could not cancel generation $NVRX_JOB_ID; its spares hold nodes until their gate or store timeouts"
    exit "$rc"
}

# A signal to the batch shell (scancel --batch, a preemption grace signal) must reach the
# launcher step and, on task 0, run the teardown at once, not when srun happens to return.
step=
drain_pid=
# shellcheck disable=SC2317 # runs from the TERM/INT traps
on_signal() {
    if [ -n "$step" ]; then kill -TERM "$step" 2>/dev/null; fi
    exit "$1"
}
trap 'on_signal 143' TERM
trap 'on_signal 130' INT
if [ "$NVRX_TASK" -eq 0 ]; then trap teardown EXIT; fi

# The control dir is the script's own and is never followed out of the work dir; the others are
# the launcher's and the training's (checkpoints may well be a link to another filesystem).
nvrx_mkdir "$NVRX_CONTROL" "this task cannot run" || exit 1
mkdir -p "$NVRX_JOB_DIR/cycle_infos" "$NVRX_JOB_DIR/logs" \
    "$NVRX_WORK_DIR/logs" "$NVRX_WORK_DIR/checkpoints" "$NVRX_WORK_DIR/tensorboard"

if [ "$NVRX_TASK" -eq 0 ] && [ "$NVRX_DRAIN_POLL" = 1 ]; then
    drain_poller &
    drain_pid=$!
fi

publish() { # FILE VALUE: atomically, so a reader never sees an empty or partial file
    nvrx_write "$1" "$2" && return 0
    # Without its control files the generation cannot form: end it now, not at its time limit.
    log "cannot write $1 (a directory there?); generation $NVRX_JOB_ID cannot form"
    exit 1
}

if [ "$NVRX_TASK" -eq 0 ]; then
    if [ "$NVRX_NO_RESTART_DEMO" = 1 ] && [ ! -e "$NVRX_CONTROL/static_iter.txt" ]; then
        publish "$NVRX_CONTROL/static_iter.txt" 1
    fi
    publish "$NVRX_CONTROL/datetime.txt" "$(date +date_%y-%m-%d_time_%H-%M-%S)"
    rdzv_host=$(nvrx_slurm scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)
    [ -n "$rdzv_host" ] || rdzv_host=$(hostname)
    # >>> one-host rehearsal
    rdzv_host=127.0.0.1 # every node is this host, and the node names do not resolve
    # <<< one-host rehearsal
    publish "$NVRX_CONTROL/rdzv_host" "$rdzv_host"
    log "rendezvous host $rdzv_host published"
fi

# Wait for task 0 to start. Unbounded on purpose: any timeout would race backfill, which may
# start task 0 long after a spare.
waited=0
until [ -s "$NVRX_CONTROL/datetime.txt" ]; do
    if [ -e "$NVRX_CONTROL/rdzv_closed" ]; then
        log "task 0 exited before it published anything; nothing to join"
        exit 1
    fi
    sleep 1
    waited=$((waited + 1))
    if [ $((waited % 60)) -eq 0 ]; then log "task $NVRX_TASK waiting for task 0 to start (${waited}s)."; fi
done
NVRX_DATETIME=$(cat "$NVRX_CONTROL/datetime.txt")

# The gate: closed before host, because when both exist the host is stale.
waited=0
while :; do
    if [ -e "$NVRX_CONTROL/rdzv_closed" ]; then
        log "task 0 exited; generation $NVRX_JOB_ID is over"
        exit 1
    fi
    if [ -s "$NVRX_CONTROL/rdzv_host" ]; then break; fi
    if [ "$waited" -ge "$NVRX_RDZV_HOST_WAIT" ]; then
        log "no rendezvous host after ${waited}s"
        exit 1
    fi
    sleep 1
    waited=$((waited + 1))
done
RDZV_HOST=$(cat "$NVRX_CONTROL/rdzv_host")

# Shape as it really is: nodes from the allocation, the active width from the live throttle (an
# operator may have changed it with scontrol update); the rendered value is only the fallback.
NODES_PER_TASK=${SLURM_JOB_NUM_NODES:-1}
ACTIVE=$NVRX_ACTIVE_TASKS
throttle=$(nvrx_slurm scontrol show job -o "$NVRX_JOB_ID" 2>/dev/null | head -n 1 |
    sed -n 's/.*ArrayTaskThrottle=\([0-9][0-9]*\).*/\1/p')
if [ -n "$throttle" ] && [ "$throttle" -gt 0 ] && [ "$throttle" != "$ACTIVE" ]; then
    log "Array throttle is $throttle, not $ACTIVE; using the throttle"
    ACTIVE=$throttle
fi
if [ "$ACTIVE" -lt "$NVRX_TRAIN_TASKS" ]; then
    log "Array throttle $ACTIVE is below the $NVRX_TRAIN_TASKS training tasks: no hot spares"
    ACTIVE=$NVRX_TRAIN_TASKS
fi
MIN_NODES=$((NVRX_TRAIN_TASKS * NODES_PER_TASK))
MAX_NODES=$((ACTIVE * NODES_PER_TASK))
WORLD_SIZE=$((MIN_NODES * GPUS_PER_NODE))

CHECKPOINT_DIR=$NVRX_WORK_DIR/checkpoints
if [ "$NVRX_NO_RESTART_DEMO" = 1 ]; then
    # The demo's progress file never advances: cycle 0 shows no progress and NVRx exits 93.
    ITERATION_FILE=$NVRX_CONTROL/static_iter.txt
else
    ITERATION_FILE=$CHECKPOINT_DIR/latest_checkpointed_iteration.txt
fi

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_FWD_LAYERNORM_SM_MARGIN=16 NVTE_BWD_LAYERNORM_SM_MARGIN=16
# One MNNVL clique per array task: tasks are separate allocations and must not be fused into
# one NVLink domain (a site that wants MNNVL on sets NCCL_MNNVL_ENABLE itself).
export NCCL_MNNVL_ENABLE="${NCCL_MNNVL_ENABLE:-0}"
export NCCL_MNNVL_CLIQUE_ID=$NVRX_TASK
export NVRX_LOG_DEBUG NVRX_GPUS_PER_NUMA
export NVRX_CHECKPOINT_DIR=$CHECKPOINT_DIR NVRX_SAVE_INTERVAL=$SAVE_INTERVAL
export NVRX_FAULT_INJECT NVRX_FAULT_RANKS NVRX_FAULT_DELAY NVRX_FAULT_TYPES
container_env=NCCL_MNNVL_ENABLE,NCCL_MNNVL_CLIQUE_ID,NVRX_LOG_DEBUG,NVRX_GPUS_PER_NUMA,NVRX_CONTROL,NVRX_NO_RESTART_EXIT_CODE,NVRX_CHECKPOINT_DIR,NVRX_SAVE_INTERVAL,NVRX_FAULT_INJECT,NVRX_FAULT_RANKS,NVRX_FAULT_DELAY,NVRX_FAULT_TYPES
if [ -n "$NVRX_INJECT_GPU_FAILURE" ]; then
    export NVRX_INJECT_GPU_FAILURE
    container_env+=,NVRX_INJECT_GPU_FAILURE
else
    unset NVRX_INJECT_GPU_FAILURE
fi

# >>> one-host rehearsal
# This generation's own pair of ports, picked by its job id: two chains, or two generations of
# one chain, never meet on the host's ports (the log server listens on every interface).
RDZV_PORT=$((RDZV_PORT + NVRX_JOB_ID % (NVRX_ONE_HOST_PORTS / 2) * 2))
NVRX_LOG_SERVER_PORT=$((RDZV_PORT + 1))
export NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE=1
container_env+=,NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE
# <<< one-host rehearsal
launch=(
    "${NVRX_LAUNCHER[@]}"
    --nnodes "$MIN_NODES:$MAX_NODES"
    --nproc-per-node "$GPUS_PER_NODE"
    --rdzv-id "$NVRX_JOB_ID"
    --rdzv-endpoint "$RDZV_HOST:$RDZV_PORT"
    --rdzv-conf "join_timeout=$NVRX_JOIN_TIMEOUT,store_connect_wait_seconds=$NVRX_STORE_CONNECT_WAIT"
    --max-restarts "$NVRX_MAX_RESTARTS"
    --ft-cycle-info-dir "$NVRX_JOB_DIR/cycle_infos"
    --ft-per-cycle-applog-prefix "$NVRX_WORK_DIR/logs/${SLURM_JOB_NAME}_${NVRX_JOB_ID}_${NVRX_DATETIME}.log"
    --ft-nvrx-logfile "$NVRX_JOB_DIR/logs/nvrx_${NVRX_JOB_ID}_${NVRX_DATETIME}.log"
    --ft-checkpoint-iteration-file "$ITERATION_FILE"
    --ft-rank-section-timeouts "setup:900,step:60,checkpointing:300"
    --ft-rank-out-of-section-timeout 90
)
# >>> one-host rehearsal
launch+=(--ft-log-server-port "$NVRX_LOG_SERVER_PORT")
# <<< one-host rehearsal
if [ -n "$NVRX_HEALTH_CHECK_ENDPOINT" ]; then
    launch+=("--ft-node-health-check-endpoint=$NVRX_HEALTH_CHECK_ENDPOINT")
fi
if [ -n "$NVRX_SEGMENT" ]; then launch+=(--ft-segment "$NVRX_SEGMENT"); fi
# The drain poller's consumer: every node of this task checks this task's admit token before
# each rendezvous, so the whole task leaves once the poller removes it. Fails open: a token
# that cannot be created means no check, never a task that evicts itself. A link at the token's
# path is replaced, never written through.
if [ "$NVRX_DRAIN_POLL" = 1 ]; then
    admit_token=$NVRX_DRAIN_DIR/admit.$SLURM_JOB_ID
    if ! nvrx_mkdir "$NVRX_DRAIN_DIR" "WARNING: this task runs without the drain check"; then
        :
    elif nvrx_write "$admit_token"; then
        launch+=("--ft-storage-health-check-path=$admit_token")
    else
        log "WARNING: cannot create $admit_token; this task runs without the drain check"
    fi
fi
if [ -n "$NVRX_MAX_NO_PROGRESS_CYCLES" ]; then
    launch+=(--ft-max-no-progress-cycles "$NVRX_MAX_NO_PROGRESS_CYCLES")
fi

# ${a[@]+"${a[@]}"}: an empty array under set -u on bash < 4.4 (still common on clusters).
if [ -n "${NVRX_TRAIN_COMMAND[*]+set}" ] && [ "${#NVRX_TRAIN_COMMAND[@]}" -gt 0 ]; then
    launch+=("${NVRX_TRAIN_COMMAND[@]}")
else
    # Megatron-LM, upstream's recipe with the profile's model; --enable-ft-package makes the
    # section timeouts apply.
    launch+=(
        "$MEGATRON_PATH/pretrain_gpt.py"
        --enable-ft-package
        "${NVRX_MODEL_ARGS[@]}"
        "${NVRX_MEGATRON_ARGS[@]}"
        --tensor-model-parallel-size "$TENSOR_PARALLEL"
        --pipeline-model-parallel-size "$PIPELINE_PARALLEL"
        --micro-batch-size "$MICRO_BATCH_SIZE" --global-batch-size "$GLOBAL_BATCH_SIZE"
        --train-samples "$TRAIN_SAMPLES" --lr-decay-samples "$LR_DECAY_SAMPLES"
        --exit-duration-in-mins "$EXIT_DURATION_IN_MINS"
        --load "$CHECKPOINT_DIR" --save "$CHECKPOINT_DIR"
        --save-interval "$SAVE_INTERVAL" --save-retain-interval "$SAVE_RETAIN_INTERVAL"
        --tensorboard-dir "$NVRX_WORK_DIR/tensorboard"
    )
    if [ "$NVRX_FAULT_INJECT" = 1 ]; then
        launch+=(
            --fault-injector-ranks "$NVRX_FAULT_RANKS"
            --fault-injector-fault-types "$NVRX_FAULT_TYPES"
            --fault-injector-fault-delay "$NVRX_FAULT_DELAY"
        )
    fi
fi

container=()
if [ -n "$NVRX_CONTAINER_IMAGE" ]; then
    container=(
        --container-image "$NVRX_CONTAINER_IMAGE"
        --container-name "nvrx_$NVRX_JOB_ID"
        --no-container-mount-home
        "--container-env=$container_env"
    )
    if [ -n "$NVRX_CONTAINER_MOUNTS" ]; then container+=(--container-mounts "$NVRX_CONTAINER_MOUNTS"); fi
fi

# >>> one-host rehearsal
if ! one_host_tmp=$(mktemp -d /tmp/nvrx.XXXXXX); then
    log "cannot create a temp dir in /tmp; this task cannot run"
    exit 1
fi
export TMPDIR=$one_host_tmp
if [ "$NVRX_TASK" -ne 0 ]; then trap one_host_cleanup EXIT; fi
# Only task 0's first node hosts the store, since every launcher takes itself for the host of
# 127.0.0.1. Decided on the node, where SLURM_PROCID tells the step's nodes apart: the word
# after the first --rdzv-conf gets is_host=1 there and is_host=0 everywhere else.
# shellcheck disable=SC2016 # expands in the node's shell
launch=(sh -c 'h=0
if [ "${SLURM_ARRAY_TASK_ID:-0}" = 0 ] && [ "${SLURM_PROCID:-0}" = 0 ]; then h=1; fi
state=start
for word do
    if [ "$state" = start ]; then set --; state=seek; fi
    if [ "$state" = value ]; then word="$word,is_host=$h"; state=done; fi
    if [ "$state" = seek ] && [ "$word" = --rdzv-conf ]; then state=value; fi
    set -- "$@" "$word"
done
exec "$@"' nvrx-one-host "${launch[@]}")
log "one-host rehearsal (chain.one_host_rehearsal): rendezvous 127.0.0.1:$RDZV_PORT, log server port $NVRX_LOG_SERVER_PORT, NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE=1, is_host on task 0's first node, TMPDIR $TMPDIR; a real cluster needs none of this"
# <<< one-host rehearsal
nodes_word=nodes
if [ "$SLURM_JOB_NUM_NODES" = 1 ]; then nodes_word=node; fi
log "launching ${NVRX_LAUNCHER[*]} on $SLURM_JOB_NUM_NODES $nodes_word: nnodes $MIN_NODES:$MAX_NODES, world $WORLD_SIZE, endpoint $RDZV_HOST:$RDZV_PORT"
# Each node's wrapper records the no-restart verdict in a file before exiting with it. srun runs
# in the background so that a signal to this shell is handled while the step runs. The wrapper
# is POSIX sh (it may run in a container): a link at the flag's path is removed, and noclobber
# creates the flag with O_EXCL, which never follows one.
# shellcheck disable=SC2016 # $@, $rc, $f and the NVRX_ variables expand in the node's shell
srun -l --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --gpus-per-node="$GPUS_PER_NODE" \
    ${container[@]+"${container[@]}"} \
    sh -c '"$@"; rc=$?; if [ "$rc" -eq "$NVRX_NO_RESTART_EXIT_CODE" ]; then f=$NVRX_CONTROL/no_restart; if [ -L "$f" ]; then rm -f "$f"; fi; [ -e "$f" ] || (set -C; : >"$f") 2>/dev/null || echo "nvrx: cannot write $f" >&2; fi; exit "$rc"' \
    nvrx-node "${launch[@]}" &
step=$!
wait "$step"
rc=$?
step=
log "launcher step ended with exit code $rc"
exit "$rc"
