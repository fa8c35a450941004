# ---------------------------------------------------------------------------------------------
# The drain poller (docs/submit-chain.md, "Drained nodes leave the rendezvous"): functions only;
# the generation body below starts `drain_poller` in the background on array task 0.
#
# Per pass, for the whole array: one sinfo (nodes in $NVRX_DRAIN_STATES) and one squeue (the
# running tasks: index, job id, nodes), each under `timeout -k` with its exit status checked and
# without the variables that set its options (nvrx_slurm). A failed or timed-out query skips the
# pass: the markers and tokens keep their last state, so a controller that does not answer never
# reads as "nothing is drained".
#
# Per running task K, in $NVRX_DRAIN_DIR (per generation, like the other control files):
#   task_K.drained  job_id=, nodes=, drained= (the task's drained nodes, empty: clean); written
#                   only when it changes, atomically. A marker whose job_id is not the task's
#                   (another allocation's) is never read as this task's verdict.
#   admit.JOBID     the consumer: every node of the task gives it to the launcher as
#                   --ft-storage-health-check-path, which checks that the path exists before
#                   each rendezvous. The task creates it at start; the poller removes it while a
#                   node of the task is drained and puts it back when none is. Keyed by the
#                   task's own job id, so a replacement never inherits a predecessor's verdict.
# Neither is written through a link (nvrx_write); a token that cannot be removed from a drained
# task is moved aside, so a refused write never readmits a drained task.
# ---------------------------------------------------------------------------------------------

# shellcheck disable=SC2317 # drain_* run in the background poller
drain_publish() { # FILE TEXT: only on change, atomically; 0 when it changed
    # A link is never this poller's marker, whatever it leads to; a marker is a few lines.
    if [ ! -L "$1" ] && [ -f "$1" ] && [ "$(head -c 65536 -- "$1")" = "$2" ]; then return 1; fi
    if nvrx_write "$1" "$2"; then return 0; fi
    log "drain poller: cannot write $1 (a directory there?); the marker keeps its last state"
    return 1
}

# shellcheck disable=SC2317
drain_revoke() { # TOKEN: gone, so the launcher's check fails; 1 when it is still there
    rm -f -- "$1" 2>/dev/null # a link is removed, never followed
    if [ -e "$1" ] || [ -L "$1" ]; then
        # Not a file (a directory): renamed aside, which any entry of the directory allows.
        mv -fT -- "$1" "$(mktemp -u -- "$1.revoked.XXXXXXXXXX")" 2>/dev/null
    fi
    [ ! -e "$1" ] && [ ! -L "$1" ]
}

# shellcheck disable=SC2317
drain_pass() { # one pass; non-zero when it published nothing
    local drained taskmap k job nodelist nodes hit held marker token
    # KILL 2 s after TERM: a client has nothing to save, and one that ignores TERM must not
    # hold the pass (and every pass after it) for good.
    local grace=2
    if ! drained=$(nvrx_slurm timeout -k "$grace" "$NVRX_DRAIN_TIMEOUT" \
        sinfo -h -N -a -t "$NVRX_DRAIN_STATES" -o '%N'); then
        log "drain poller: sinfo failed or timed out after ${NVRX_DRAIN_TIMEOUT}s; this pass publishes nothing"
        return 1
    fi
    drained=$(printf '%s\n' "$drained" | sed '/^$/d' | sort -u)
    if ! taskmap=$(nvrx_slurm timeout -k "$grace" "$NVRX_DRAIN_TIMEOUT" \
        squeue -h -r -j "$NVRX_JOB_ID" -t R -o '%K|%A|%N'); then
        log "drain poller: squeue failed or timed out after ${NVRX_DRAIN_TIMEOUT}s; this pass publishes nothing"
        return 1
    fi
    while IFS='|' read -r k job nodelist; do
        case "$k" in '' | *[!0-9]*) continue ;; esac
        case "$job" in '' | *[!0-9]*) continue ;; esac
        # A local expansion, but guarded too: no nodes must never read as "none drained".
        if ! nodes=$(nvrx_slurm scontrol show hostnames "$nodelist") || [ -z "$nodes" ]; then
            log "drain poller: cannot expand task $k's nodes '$nodelist'; task $k keeps its last state"
            continue
        fi
        hit=
        if [ -n "$drained" ]; then
            hit=$(printf '%s\n' "$nodes" | grep -Fx -f <(printf '%s\n' "$drained") | paste -sd, -)
        fi
        marker=$NVRX_DRAIN_DIR/task_$k.drained
        token=$NVRX_DRAIN_DIR/admit.$job
        held="drained node $hit"
        case "$hit" in *,*) held="drained nodes $hit" ;; esac
        if [ -n "$hit" ]; then
            if ! drain_revoke "$token"; then
                log "drain poller: WARNING: cannot remove $token; task $k (job $job) holds $held and stays admitted"
            fi
        elif [ -L "$token" ] || [ ! -e "$token" ]; then
            # A link is replaced by a file: a dangling one would evict a clean task, and a
            # token is never created at a link's target.
            nvrx_write "$token" || log "drain poller: cannot create $token; task $k (job $job) leaves at its next rendezvous"
        fi
        if drain_publish "$marker" "$(printf 'job_id=%s\nnodes=%s\ndrained=%s' "$job" "$nodelist" "$hit")"; then
            if [ -n "$hit" ]; then
                log "drain poller: task $k (job $job) holds $held; its nodes leave at the next rendezvous"
            else
                log "drain poller: task $k (job $job) is clean"
            fi
        fi
    done <<<"$taskmap"
    return 0
}

# shellcheck disable=SC2317
drain_poller() { # runs until killed; the EXIT trap of task 0 kills it
    local sleeper=
    trap 'if [ -n "$sleeper" ]; then kill "$sleeper" 2>/dev/null; fi; exit 0' TERM
    nvrx_mkdir "$NVRX_DRAIN_DIR" "no drain poller for this generation" || return 1
    log "drain poller: every ${NVRX_DRAIN_POLL_INTERVAL}s, states $NVRX_DRAIN_STATES, query timeout ${NVRX_DRAIN_TIMEOUT}s"
    while :; do
        drain_pass || :
        sleep "$NVRX_DRAIN_POLL_INTERVAL" &
        sleeper=$!
        wait "$sleeper"
        sleeper=
    done
}
