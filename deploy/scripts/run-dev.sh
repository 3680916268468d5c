#!/usr/bin/env bash
# `make run`: a Nomad dev agent (unless one already answers at NOMAD_ADDR) and
# `mediajobs dev` (embedded etcd, gateway, dispatcher). Ctrl-C or SIGTERM stops
# everything this script started.
set -euo pipefail
cd "$(dirname "$0")/../.."

NOMAD_BIN="$(deploy/scripts/install-nomad.sh)"
export NOMAD_ADDR="${NOMAD_ADDR:-http://127.0.0.1:4646}"
DATA="${MEDIAJOBS_DATA:-.data}"
mkdir -p "$DATA"

pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if curl -sf "$NOMAD_ADDR/v1/status/leader" >/dev/null 2>&1; then
	echo "using the Nomad agent already running at $NOMAD_ADDR"
else
	echo "starting nomad agent -dev (log: $DATA/nomad.log)"
	"$NOMAD_BIN" agent -dev -config deploy/nomad-dev.hcl >"$DATA/nomad.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 120); do
		if curl -sf "$NOMAD_ADDR/v1/nodes" 2>/dev/null | grep -q '"Status":"ready"'; then break; fi
		if ! kill -0 "${pids[0]}" 2>/dev/null; then
			echo "nomad agent exited; see $DATA/nomad.log" >&2
			tail -20 "$DATA/nomad.log" >&2
			exit 1
		fi
		sleep 0.5
	done
fi

bin/mediajobs dev -data "$DATA" &
pids+=($!)
wait "${pids[-1]}"
