#!/usr/bin/env bash
# `make run` on a machine without a built Nomad: starts install-nomad.sh in the
# background (about 10 minutes on 2 cores, once) so that it overlaps the apt step
# and the build of bin/mediajobs, and `mediajobs dev` can come up before it ends
# (jobs wait in the queue until the agent is up; run-dev.sh starts it then).
#
#   nomad-background.sh start   start the build unless Nomad is built or being built
#   nomad-background.sh wait    wait for a build started here; print the binary's path
#
# The build's pid and log are in $DATA (default .data): nomad-build.pid, nomad-build.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${MEDIAJOBS_DATA:-.data}"
PIDFILE="$DATA/nomad-build.pid"
LOG="$DATA/nomad-build.log"

# building: the pid file names a live install-nomad.sh (not a pid reused since a reboot).
building() {
	[ -s "$PIDFILE" ] && tr '\0' ' ' <"/proc/$(cat "$PIDFILE")/cmdline" 2>/dev/null | grep -q install-nomad.sh
}

case "${1:-}" in
start)
	if deploy/scripts/install-nomad.sh --cached >/dev/null 2>&1 || building; then exit 0; fi
	mkdir -p "$DATA"
	echo "==> build Nomad v1.11.3 with its web UI in the background (first time: about 10 minutes on 2 cores; log: $LOG)" >&2
	# Its own session: a Ctrl-C during the apt step or the mediajobs build leaves it
	# running (its work is cached either way); run-dev.sh stops it on exit.
	setsid deploy/scripts/install-nomad.sh >"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	;;
wait)
	start=$SECONDS
	while building; do sleep 2; done
	rm -f "$PIDFILE"
	if ! bin="$(deploy/scripts/install-nomad.sh --cached)"; then
		echo "building Nomad failed; the end of $LOG:" >&2
		tail -20 "$LOG" >&2
		exit 1
	fi
	[ $((SECONDS - start)) -lt 2 ] || echo "==> Nomad built" >&2
	echo "$bin"
	;;
stop)
	if building; then kill -- -"$(cat "$PIDFILE")" 2>/dev/null || true; fi
	rm -f "$PIDFILE"
	;;
*)
	echo "usage: $0 start|wait|stop" >&2
	exit 2
	;;
esac
