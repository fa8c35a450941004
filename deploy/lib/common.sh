# shellcheck shell=bash disable=SC2034 # PROG is used by the sourcing scripts
# Helpers shared by deploy/local-slurm/lib.sh and deploy/local-llm/lib.sh
# (one copy, so the two deployments cannot drift apart). Sourced, never executed.

PROG=${0##*/}

msg() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

# is_int VALUE MIN MAX: VALUE is decimal digits within [MIN, MAX].
# 10# so that a leading zero ("08") is decimal, not an octal error.
is_int() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= $2 && 10#$1 <= $3)); }

# param_get KEY [FILE]: the value of KEY=VALUE in FILE (default $PARAMS_FILE).
param_get() {
	local key=$1 file=${2:-$PARAMS_FILE} k v
	[[ -r $file ]] || return 1
	while IFS='=' read -r k v; do
		if [[ $k == "$key" ]]; then
			echo "$v"
			return 0
		fi
	done <"$file"
	return 1
}

# ----------------------------------------------------------------------------
# Processes.

# proc_alive PID: the process exists and is not a zombie.
proc_alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# proc_starttime PID: field 22 of /proc/PID/stat (clock ticks since boot), to detect pid reuse.
proc_starttime() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	# after "comm) " the fields start at field 3; starttime is field 22 -> index 19
	local -a f
	read -r -a f <<<"$stat"
	echo "${f[19]}"
}

# close_fds: close every inherited file descriptor above 2 (call in a subshell).
close_fds() {
	local f fd
	for f in /proc/"$BASHPID"/fd/*; do
		fd=${f##*/}
		[[ $fd =~ ^[0-9]+$ ]] || continue
		((fd > 2)) || continue
		exec {fd}>&-
	done
}

# spawn_bg OUTFILE CMD...: run CMD in the background in a new session, stdin
# from /dev/null, stdout+stderr appended to OUTFILE and no other inherited
# descriptors (so `up | tee` and CI pipes return). $! is CMD's pid.
spawn_bg() {
	local out=$1
	shift
	(
		close_fds
		exec setsid "$@" </dev/null >>"$out" 2>&1
	) &
}

# port_in_use PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ----------------------------------------------------------------------------
# Time.

now_ms() {
	local s ns
	read -r s ns < <(date '+%s %N')
	echo $((s * 1000 + 10#$ns / 1000000))
}

elapsed_s() { # elapsed_s START_MS -> "1.23"
	local d=$(($(now_ms) - $1))
	printf '%d.%02d' $((d / 1000)) $((d % 1000 / 10))
}

# ----------------------------------------------------------------------------
# Packages and stopping.

# install_packages LOGFILE PKG...: apt-get install the packages that dpkg does not list as
# installed, apt's output appended to LOGFILE. The caller holds its state lock on $LOCK_FD.
install_packages() {
	local log=$1 p missing=()
	shift
	command -v dpkg-query >/dev/null || return 0
	for p in "$@"; do
		if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) != "install ok installed" ]]; then
			missing+=("$p")
		fi
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
	[[ $EUID -eq 0 ]] || die "missing packages ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root"
	msg "installing ${missing[*]} (apt-get; output in $log)"
	local t0
	t0=$(now_ms)
	apt-get update -q >>"$log" 2>&1 {LOCK_FD}>&- ||
		die "apt-get update failed; read $log"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 {LOCK_FD}>&- ||
		die "apt-get install ${missing[*]} failed; read $log"
	msg "installed ${missing[*]} in $(elapsed_s "$t0")s"
}

# stop_pids TIMEOUT NAME=PID...: SIGTERM each, wait up to TIMEOUT s for all to
# exit, then SIGKILL the rest and wait again. Prints one line per process.
# Returns 1 when one is still alive after SIGKILL (the caller decides: warn or die).
stop_pids() {
	local timeout=$1
	shift
	local -A start=() t0=() pidof=()
	local item name pid st deadline
	for item in "$@"; do
		name=${item%%=*}
		pid=${item#*=}
		st=$(proc_starttime "$pid") || continue
		start[$name]=$st
		pidof[$name]=$pid
		t0[$name]=$(now_ms)
		kill -TERM "$pid" 2>/dev/null || true
	done
	_gone() { # _gone NAME
		local p=${pidof[$1]} s
		proc_alive "$p" || return 0
		s=$(proc_starttime "$p") || return 0
		[[ $s != "${start[$1]}" ]]
	}
	deadline=$(($(now_ms) + timeout * 1000))
	local pending=1
	while ((pending)) && (($(now_ms) < deadline)); do
		pending=0
		for name in "${!pidof[@]}"; do
			_gone "$name" || pending=1
		done
		((pending)) && sleep 0.1
	done
	for name in "${!pidof[@]}"; do
		if ! _gone "$name"; then
			warn "$name (pid ${pidof[$name]}) did not exit within ${timeout}s of SIGTERM; sending SIGKILL"
			kill -KILL "${pidof[$name]}" 2>/dev/null || true
		fi
	done
	deadline=$(($(now_ms) + 10000))
	local alive=0
	for name in $(printf '%s\n' "${!pidof[@]}" | sort); do
		while ! _gone "$name" && (($(now_ms) < deadline)); do sleep 0.1; done
		if _gone "$name"; then
			msg "stopped $name (pid ${pidof[$name]}) in $(elapsed_s "${t0[$name]}")s"
		else
			warn "$name (pid ${pidof[$name]}) still alive after SIGKILL"
			alive=1
		fi
	done
	return "$alive"
}
