# shellcheck shell=bash disable=SC2034 # constants and paths are used by up/down/status
# Shared helpers for deploy/local-slurm/{up,down,status}. Sourced, never executed.
#
# Everything the local cluster needs lives under one state directory ($STATE):
#   etc/    slurm.conf gres.conf slurmdbd.conf my.cnf cluster.params
#   run/    pid files (run/munge/ is owned by the munge user)
#   log/    daemon logs; *.out files catch what a daemon prints before it detaches
#   spool/  slurmctld state (StateSaveLocation) and one slurmd spool dir per node
#   mysql/  MariaDB datadir and socket
#   dev/    fake GPU character devices (same numbers as /dev/null)

NVRX_DEFAULT_STATE_DIR=/var/lib/nvrx-local-slurm
CLUSTER_NAME=nvrx
ACCOUNT_NAME=nvrx
PARTITION_NAME=main
CTLD_PORT=6817
DBD_PORT=6819
SLURMD_PORT_BASE=6820 # node nI listens on SLURMD_PORT_BASE + I
DB_PORT=33061         # MariaDB, deliberately not 3306
MARKER_FILE=.nvrx-local-slurm
ETC_SLURM=/etc/slurm

# Shared helpers (msg/warn/die, is_int, param_get, proc_*, spawn_bg, now_ms, ...).
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/common.sh"

require_root() {
	[[ $EUID -eq 0 ]] || die "must run as root"
}

# set_state_dir DIR: validate DIR and derive every path from it.
set_state_dir() {
	local dir=$1
	[[ $dir == /* ]] || die "state dir must be an absolute path: $dir"
	[[ $dir =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "state dir may only contain letters, digits and . _ / + - (Slurm config files cannot quote paths): $dir"
	dir=${dir%/}
	[[ -n $dir && $dir != / ]] || die "refusing to use / as state dir"
	STATE=$dir
	ETC=$STATE/etc
	RUN=$STATE/run
	LOG=$STATE/log
	SPOOL=$STATE/spool
	MYSQL=$STATE/mysql
	DEVDIR=$STATE/dev
	SLURM_CONF_FILE=$ETC/slurm.conf
	PARAMS_FILE=$ETC/cluster.params
	MY_CNF=$ETC/my.cnf
	export SLURM_CONF=$SLURM_CONF_FILE
}

# ----------------------------------------------------------------------------
# Daemons. A daemon name is one of: munged mariadb slurmdbd slurmctld slurmd:nI

daemon_prog() {
	case $1 in
	munged) echo munged ;;
	mariadb) echo mariadbd ;;
	slurmdbd) echo slurmdbd ;;
	slurmctld) echo slurmctld ;;
	slurmd:*) echo slurmd ;;
	*) return 1 ;;
	esac
}

daemon_pidfile() {
	case $1 in
	munged) echo "$RUN/munge/munged.pid" ;;
	mariadb) echo "$RUN/mariadb.pid" ;;
	slurmdbd) echo "$RUN/slurmdbd.pid" ;;
	slurmctld) echo "$RUN/slurmctld.pid" ;;
	slurmd:*) echo "$RUN/slurmd-${1#slurmd:}.pid" ;;
	*) return 1 ;;
	esac
}

daemon_log() {
	case $1 in
	munged) echo "$LOG/munged.log" ;;
	mariadb) echo "$LOG/mariadb.log" ;;
	slurmdbd) echo "$LOG/slurmdbd.log" ;;
	slurmctld) echo "$LOG/slurmctld.log" ;;
	slurmd:*) echo "$LOG/slurmd-${1#slurmd:}.log" ;;
	*) return 1 ;;
	esac
}

# Where a daemon's stdout/stderr go until it detaches (start-up errors land here).
daemon_out() { echo "$LOG/${1/:/-}.out"; }

# proc_is_prog PID PROG: /proc/PID/exe is the installed PROG binary (through
# Debian's alternatives symlinks), or at least the command name is PROG.
proc_is_prog() {
	local pid=$1 prog=$2 exe want comm
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || exe=
	exe=${exe% (deleted)}
	want=$(command -v "$prog" 2>/dev/null) || want=/usr/sbin/$prog
	want=$(readlink -f "$want" 2>/dev/null) || want=
	if [[ -n $exe && -n $want ]]; then
		[[ $exe == "$want" ]] && return 0
	fi
	comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[[ $comm == "${prog:0:15}" && -z $exe ]]
}

# proc_mentions PID TEXT: TEXT occurs in the process's command line or initial environment.
proc_mentions() {
	local pid=$1 text=$2
	{ tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$text" && return 0
	{ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qF -- "$text"
}

# proc_env_has PID LINE...: every LINE (or prefix ending in '=') is in the process's initial environment.
proc_env_has() {
	local pid=$1 env line
	shift
	env=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || return 1
	for line in "$@"; do
		if [[ $line == *= ]]; then
			grep -q -- "^$line" <<<"$env" || return 1
		else
			grep -qxF -- "$line" <<<"$env" || return 1
		fi
	done
}

# proc_has_fd_under PID DIR: the process has a file open (or its cwd) below DIR.
proc_has_fd_under() {
	local pid=$1 dir=$2 f t
	for f in "/proc/$pid/cwd" "/proc/$pid"/fd/*; do
		t=$(readlink "$f" 2>/dev/null) || continue
		[[ $t == "$dir"/* ]] && return 0
	done
	return 1
}

# proc_has_args PID A B: the command line has argument A immediately followed by B.
proc_has_args() {
	local pid=$1 a=$2 b=$3 prev='' arg
	while IFS= read -r -d '' arg; do
		[[ $prev == "$a" && $arg == "$b" ]] && return 0
		prev=$arg
	done 2>/dev/null <"/proc/$pid/cmdline"
	return 1
}

# pid_is_daemon NAME PID: PID is alive, is the right program and belongs to this state dir.
pid_is_daemon() {
	local name=$1 pid=$2 prog
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
	prog=$(daemon_prog "$name") || return 1
	proc_alive "$pid" || return 1
	proc_is_prog "$pid" "$prog" || return 1
	proc_mentions "$pid" "$STATE/" || return 1
	if [[ $name == slurmd:* ]]; then
		proc_has_args "$pid" -N "${name#slurmd:}" || return 1
	fi
	return 0
}

# daemon_pid NAME: print the pid of the running daemon NAME started by up, or fail.
# A pid file whose pid is dead or is another program is stale and is ignored.
daemon_pid() {
	local name=$1 file pid
	file=$(daemon_pidfile "$name") || return 1
	[[ -r $file ]] || return 1
	read -r pid <"$file" 2>/dev/null || return 1
	pid_is_daemon "$name" "$pid" || return 1
	echo "$pid"
}

# Nodes named in the current config, plus any node with a pid file (older config).
config_nodes() {
	local n=0 i
	n=$(param_get nodes) || n=0
	for ((i = 1; i <= n; i++)); do echo "n$i"; done
}

known_nodes() {
	local f node
	{
		config_nodes
		for f in "$RUN"/slurmd-*.pid; do
			[[ -e $f ]] || continue
			node=${f##*/slurmd-}
			echo "${node%.pid}"
		done
	} | sort -t n -k 2 -n -u
}

# munge_works: the munge socket answers (whoever started munged).
munge_works() {
	command -v munge >/dev/null 2>&1 || return 1
	munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1
}

# external_munged_pid: a munged not started by up (e.g. the distribution's), if any.
external_munged_pid() {
	local p
	for p in $(pgrep -x munged 2>/dev/null); do
		proc_alive "$p" || continue
		if ! pid_is_daemon munged "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# ----------------------------------------------------------------------------
# Process starting.

# spawn OUTFILE CMD...: run CMD in a new session with stdin from /dev/null,
# stdout+stderr appended to OUTFILE and no other inherited descriptors, then
# wait for CMD to return (daemons that fork return at once). spawn_bg
# (common.sh) is the background form, for programs that do not fork.
spawn() {
	local out=$1
	shift
	(
		close_fds
		exec setsid "$@" </dev/null >>"$out" 2>&1
	)
}

# ----------------------------------------------------------------------------
# Process stopping.

# descendants PID: all descendants of PID (children first listed after parents).
descendants() {
	local root=$1 f stat pid ppid
	local -A kids=()
	for f in /proc/[0-9]*/stat; do
		stat=$(cat "$f" 2>/dev/null) || continue
		pid=${stat%% *}
		stat=${stat##*) }
		read -r _ ppid _ <<<"$stat"
		kids[$ppid]+=" $pid"
	done
	local -a queue=("$root")
	local cur c
	while ((${#queue[@]})); do
		cur=${queue[0]}
		queue=("${queue[@]:1}")
		for c in ${kids[$cur]:-}; do
			echo "$c"
			queue+=("$c")
		done
	done
}

