#!/usr/bin/env bash
# Makes sure a Docker daemon answers `docker info`; idempotent.
#
# If one already answers, prints "docker already running" and exits 0. Otherwise
# installs Debian's docker.io with apt-get when dockerd is missing (as root, or
# through sudo), then starts
#   dockerd --bridge=none --iptables=false --ip-masq=false
# in the background (no bridge, no iptables: the containers mediajobs runs need no
# network of their own, and this works on hosts where iptables is unavailable),
# and waits up to 60 s for it to answer.
#
# Environment:
#   MEDIAJOBS_DOCKERD_LOG  dockerd's log  (default /tmp/mediajobs-dockerd.log)
#   MEDIAJOBS_DOCKERD_PID  dockerd's pid  (default /tmp/mediajobs-dockerd.pid)
#   MEDIAJOBS_DOCKERD_ARGS more dockerd flags, split on spaces (e.g. --data-root DIR)
set -euo pipefail

LOG="${MEDIAJOBS_DOCKERD_LOG:-/tmp/mediajobs-dockerd.log}"
PIDFILE="${MEDIAJOBS_DOCKERD_PID:-/tmp/mediajobs-dockerd.pid}"
WAIT_S=60

docker_ok() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if docker_ok; then
	echo "docker already running"
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	echo "installing docker.io with apt-get..." >&2
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get install -y -q docker.io >&2 || {
		$SUDO apt-get update -q >&2
		$SUDO apt-get install -y -q docker.io >&2
	}
	hash -r
	# The package may have started the daemon itself (systemd hosts).
	for _ in 1 2 3 4 5; do
		if docker_ok; then
			echo "docker running (started by the docker.io package)"
			exit 0
		fi
		sleep 1
	done
fi

DOCKERD="$(command -v dockerd || echo /usr/sbin/dockerd)"

# A dockerd we started earlier that is still coming up: wait for it, don't start a second.
pid=""
if [ -s "$PIDFILE" ]; then
	pid="$(cat "$PIDFILE" 2>/dev/null || true)"
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null; then
		echo "waiting for the dockerd started earlier (pid $pid)" >&2
	else
		pid=""
	fi
fi

if [ -z "$pid" ]; then
	# Not answering, but the socket is there and root can talk to it: a running
	# daemon this user may not use.
	if [ -n "$SUDO" ] && [ -S /var/run/docker.sock ] && sudo -n docker info >/dev/null 2>&1; then
		echo "dockerd is running but $(id -un) cannot use /var/run/docker.sock; add the user to the docker group (sudo usermod -aG docker $(id -un)) and log in again" >&2
		exit 1
	fi
	echo "starting dockerd (log: $LOG, pid file: $PIDFILE)" >&2
	# A pid file left by an earlier dockerd would be read below as the new one's.
	rm -f "$PIDFILE" 2>/dev/null || $SUDO rm -f "$PIDFILE"
	: >"$LOG" 2>/dev/null || $SUDO sh -c ': >"$1"' sh "$LOG"
	# The inner shell writes its own pid and execs dockerd, so the pid file holds
	# dockerd's pid even through sudo; setsid/nohup keep it alive after we exit.
	# shellcheck disable=SC2086 # MEDIAJOBS_DOCKERD_ARGS is split on purpose
	$SUDO setsid nohup sh -c 'p="$1"; shift; echo $$ >"$p"; exec "$@"' \
		sh "$PIDFILE" "$DOCKERD" --bridge=none --iptables=false --ip-masq=false ${MEDIAJOBS_DOCKERD_ARGS:-} \
		>>"$LOG" 2>&1 </dev/null &
	for _ in $(seq 1 50); do
		[ -s "$PIDFILE" ] && break
		sleep 0.1
	done
	pid="$(cat "$PIDFILE" 2>/dev/null || true)"
fi

for _ in $(seq 1 $((WAIT_S * 2))); do
	if docker_ok || { [ -n "$SUDO" ] && sudo -n docker info >/dev/null 2>&1; }; then
		if docker_ok; then
			echo "docker running (dockerd pid ${pid:-?})"
			exit 0
		fi
		echo "dockerd is running (pid ${pid:-?}) but $(id -un) cannot use /var/run/docker.sock; add the user to the docker group or run as root" >&2
		exit 1
	fi
	if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && ! $SUDO kill -0 "$pid" 2>/dev/null; then
		echo "dockerd exited; last lines of $LOG:" >&2
		tail -n 30 "$LOG" >&2 || true
		exit 1
	fi
	sleep 0.5
done

echo "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:" >&2
tail -n 30 "$LOG" >&2 || true
exit 1
