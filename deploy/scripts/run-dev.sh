#!/usr/bin/env bash
# `make run`: a Nomad dev agent (unless one already answers at NOMAD_ADDR) and
# `mediajobs dev` (embedded etcd, gateway, dispatcher). With MEDIAJOBS_STORAGE=s3,
# also a MinIO server on loopback (install-minio.sh) with its data in $DATA/minio.
# Ctrl-C or SIGTERM stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/../.."

export NOMAD_ADDR="${NOMAD_ADDR:-http://127.0.0.1:4646}"
DATA="${MEDIAJOBS_DATA:-.data}"
mkdir -p "$DATA"

pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	deploy/scripts/nomad-background.sh stop
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_nomad BIN: a dev agent, once its node is ready.
start_nomad() {
	echo "starting nomad agent -dev (log: $DATA/nomad.log)"
	"$1" agent -dev -config deploy/nomad-dev.hcl >"$DATA/nomad.log" 2>&1 &
	local pid=$!
	pids+=($pid)
	for _ in $(seq 1 120); do
		if curl -sf "$NOMAD_ADDR/v1/nodes" 2>/dev/null | grep -q '"Status":"ready"'; then return 0; fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "nomad agent exited; see $DATA/nomad.log" >&2
			tail -20 "$DATA/nomad.log" >&2
			exit 1
		fi
		sleep 0.5
	done
}

# Nomad not built yet (a fresh machine): mediajobs starts first, the agent once
# the background build (nomad-background.sh) is done.
nomad_later=""
if curl -sf "$NOMAD_ADDR/v1/status/leader" >/dev/null 2>&1; then
	echo "using the Nomad agent already running at $NOMAD_ADDR"
elif NOMAD_BIN="$(deploy/scripts/install-nomad.sh --cached)"; then
	start_nomad "$NOMAD_BIN"
else
	deploy/scripts/nomad-background.sh start
	nomad_later=1
	export MEDIAJOBS_NOMAD_PENDING="$DATA/nomad-build.log"
fi

if [ "${MEDIAJOBS_STORAGE:-}" = s3 ]; then
	MINIO_BIN="$(deploy/scripts/install-minio.sh)"
	MINIO_ADDR="${MEDIAJOBS_MINIO_ADDR:-127.0.0.1:9000}"
	MINIO_CONSOLE_ADDR="${MEDIAJOBS_MINIO_CONSOLE_ADDR:-127.0.0.1:9001}" # the console is off; pinned to loopback all the same
	MINIO_ENDPOINT="http://$MINIO_ADDR"
	BUCKET=mediajobs
	# The root credentials are made once and kept beside the data, like the dev API key.
	if [ ! -s "$DATA/minio_credentials" ]; then
		(umask 077; printf '%s %s\n' "mj$(od -An -tx1 -N9 /dev/urandom | tr -d ' \n')" \
			"$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')" >"$DATA/minio_credentials")
	fi
	read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY <"$DATA/minio_credentials"
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1
	export MEDIAJOBS_S3_URL="s3://$BUCKET?endpoint=$MINIO_ENDPOINT&use_path_style=true&region=$AWS_REGION"
	mkdir -p "$DATA/minio"
	echo "starting minio server on $MINIO_ENDPOINT (data: $DATA/minio, log: $DATA/minio.log)"
	env MINIO_ROOT_USER="$AWS_ACCESS_KEY_ID" MINIO_ROOT_PASSWORD="$AWS_SECRET_ACCESS_KEY" MINIO_REGION="$AWS_REGION" \
		MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
		"$MINIO_BIN" server --address "$MINIO_ADDR" --console-address "$MINIO_CONSOLE_ADDR" "$DATA/minio" >"$DATA/minio.log" 2>&1 &
	minio_pid=$!
	pids+=($minio_pid)
	for i in $(seq 1 120); do
		if curl -sf "$MINIO_ENDPOINT/minio/health/ready" >/dev/null 2>&1; then break; fi
		if ! kill -0 "$minio_pid" 2>/dev/null || [ "$i" = 120 ]; then
			echo "minio server did not start; see $DATA/minio.log" >&2
			tail -20 "$DATA/minio.log" >&2
			exit 1
		fi
		sleep 0.5
	done
	# PUT /bucket signed with SigV4 by curl; 409 is a bucket made by an earlier run.
	code="$(curl -s -o "$DATA/minio.bucket.out" -w '%{http_code}' -X PUT \
		--aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
		"$MINIO_ENDPOINT/$BUCKET")"
	if [ "$code" != 200 ] && [ "$code" != 409 ]; then
		echo "creating bucket $BUCKET failed: HTTP $code" >&2
		cat "$DATA/minio.bucket.out" >&2
		exit 1
	fi
	rm -f "$DATA/minio.bucket.out"
	echo "S3 storage (MinIO) for mediajobs:"
	echo "  MEDIAJOBS_S3_URL=$MEDIAJOBS_S3_URL"
	echo "  AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
	echo "  AWS_SECRET_ACCESS_KEY: the second word of $DATA/minio_credentials"
	echo "  AWS_REGION=$AWS_REGION"
fi

bin/mediajobs dev -data "$DATA" &
dev_pid=$!
pids+=($dev_pid)
if [ -n "$nomad_later" ]; then
	deploy/scripts/nomad-background.sh wait >"$DATA/nomad-build.bin" &
	waiter=$!
	# Whichever ends first: the build, or mediajobs (then so does this script).
	while kill -0 "$waiter" 2>/dev/null && kill -0 "$dev_pid" 2>/dev/null; do sleep 1; done
	if ! kill -0 "$dev_pid" 2>/dev/null; then
		rc=0
		wait "$dev_pid" || rc=$?
		exit "$rc"
	fi
	wait "$waiter"
	start_nomad "$(cat "$DATA/nomad-build.bin")"
	echo "Nomad is up at $NOMAD_ADDR (UI: $NOMAD_ADDR/ui/jobs): queued jobs start now"
fi
wait "$dev_pid"
