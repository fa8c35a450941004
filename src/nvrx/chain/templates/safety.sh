# ---------------------------------------------------------------------------------------------
# How the script writes its files and runs Slurm's clients (docs/submit-chain.md, "Links and
# the environment"). Whoever can write the work dir, and the job's own environment, are inputs:
#   - a file is never written through a link, nor moved into the directory a link names, and
#     the script's own directories below the work dir are never links;
#   - a Slurm client never sees the variables that set its options (SQUEUE_STATES,
#     SINFO_PARTITION, ...): they would narrow a query, and "nothing drained in this partition"
#     would readmit a drained task.
# ---------------------------------------------------------------------------------------------

# shellcheck disable=SC2317 # called from the poller and the generation body
nvrx_write() { # FILE [TEXT]: FILE holds TEXT and a newline (no TEXT: nothing); 1 when refused
    local tmp
    # A fresh name in FILE's directory, created exclusively (noclobber opens a name that does
    # not exist with O_EXCL, which never follows a link), then renamed over FILE with
    # --no-target-directory: a link there is replaced, never written through nor moved into,
    # and a directory there refuses the write.
    tmp=$(mktemp -u -- "$1.XXXXXXXXXX") || return 1
    if (
        set -C
        if [ $# -ge 2 ]; then printf '%s\n' "$2"; fi >"$tmp"
    ) 2>/dev/null && mv -fT -- "$tmp" "$1" 2>/dev/null; then
        return 0
    fi
    rm -f -- "$tmp"
    return 1
}

# shellcheck disable=SC2317
nvrx_flag() { # FILE: exists afterwards (a link there is replaced); 1 when refused
    if [ -e "$1" ] && [ ! -L "$1" ]; then return 0; fi
    nvrx_write "$1"
}

# shellcheck disable=SC2317
nvrx_mkdir() { # DIR WHAT: DIR below $NVRX_WORK_DIR, one level at a time; never through a link
    local path=$NVRX_WORK_DIR part
    local -a parts
    case $1 in "$NVRX_WORK_DIR"/?*) ;; *) return 1 ;; esac
    IFS=/ read -ra parts <<<"${1#"$NVRX_WORK_DIR"/}"
    mkdir -p -- "$NVRX_WORK_DIR" # the user's: it may be a link, to wherever they chose
    for part in "${parts[@]}"; do
        path=$path/$part
        # mkdir never follows a link it finds at its own name; the check after it catches a
        # link that was there already, before anything is made below it.
        mkdir -- "$path" 2>/dev/null
        if [ -L "$path" ] || [ ! -d "$path" ]; then
            log "cannot use $path (a link or not a directory: not followed); $2"
            return 1
        fi
    done
}

# shellcheck disable=SC2317
nvrx_slurm() { # CMD [ARG...]: CMD without the variables that set a Slurm client's options
    local name
    local -a clear=()
    # By prefix, as they are set when CMD runs: complete for every release (Slurm 22.05 reads
    # SINFO_{ALL,FEDERATION,FORMAT,LOCAL,PARTITION,SORT}, SQUEUE_{ACCOUNT,ALL,ARRAY,
    # ARRAY_UNIQUE,FEDERATION,FORMAT,FORMAT2,LICENSES,LOCAL,NAMES,PARTITION,PRIORITY,QOS,SIB,
    # SIBLING,SORT,STATES,USERS}, SCANCEL_*, SCONTROL_*), and `env -u` works where `unset`
    # cannot (a readonly variable). SLURM_CONF stays: it is how a configless node finds its
    # cluster.
    for name in "${!SINFO_@}" "${!SQUEUE_@}" "${!SCANCEL_@}" "${!SCONTROL_@}" \
        SLURM_CLUSTERS SLURM_BITSTR_LEN SLURM_TIME_FORMAT SLURM_DEBUG_FLAGS; do
        clear+=(-u "$name")
    done
    env "${clear[@]}" "$@"
}
