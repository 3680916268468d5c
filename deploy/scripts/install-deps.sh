#!/usr/bin/env bash
# Installs what mediajobs needs on a fresh Debian machine, and only that:
#
#   install-deps.sh dev   what `make run` needs: ffmpeg/ffprobe, curl and bubblewrap
#                         (the sandbox of raw_exec pools) from Debian's packages, and
#                         Nomad with its web UI built from the Go module proxy
#                         (install-nomad.sh); MinIO (install-minio.sh) only when
#                         MEDIAJOBS_STORAGE=s3. Docker is the Makefile's business
#                         (`make docker`, only with MEDIAJOBS_DRIVER=docker).
#   install-deps.sh test  the above, plus what only the tests need: chromium (the
#                         browser tests), promtool (package prometheus, the alert
#                         rules' test) and MinIO (the S3 tests).
#
# Packages come from apt-get (as root, or through sudo); Nomad and MinIO are built
# once into ~/.cache/mediajobs, which `make run`, `make cluster` and `make test`
# share. Each step says what it does and roughly how long it takes the first time
# (2 cores); steps with nothing to do print nothing. Progress goes to stderr.
set -euo pipefail

MODE="${1:-dev}"
case "$MODE" in dev | test) ;; *)
	echo "usage: $0 dev|test" >&2
	exit 2
	;;
esac
HERE="$(dirname "$0")"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# step NAME ESTIMATE CMD...: runs CMD, saying what and how long it took.
step() {
	local name="$1" estimate="$2" start=$SECONDS
	shift 2
	echo "==> $name (first time: $estimate)..." >&2
	"$@"
	echo "==> $name: done in $((SECONDS - start)) s" >&2
}

apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get install -y -q "$@" >&2 || {
		$SUDO apt-get update -q >&2
		$SUDO apt-get install -y -q "$@" >&2
	}
}

missing=()
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
command -v ffprobe >/dev/null 2>&1 || missing+=(ffmpeg)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# drawtext and subtitles= without a font file need fontconfig's default family.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ "$MODE" = test ]; then
	# Headless Chromium drives the dashboard's and the Nomad UI's browser tests.
	command -v chromium >/dev/null 2>&1 || missing+=(chromium)
	# The MCP inspector's CLI (npm) lists `mediajobs mcp`'s tools in a test.
	command -v node >/dev/null 2>&1 || missing+=(nodejs)
	command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
	# shellcheck disable=SC2207
	missing=($(printf '%s\n' "${missing[@]}" | sort -u))
	step "apt-get install ${missing[*]}" "about 1 minute, 4 with chromium" apt_install "${missing[@]}"
fi

# promtool checks deploy/observability/alerts.yml in the tests. Debian ships it only
# in the prometheus package: installed without its recommends (node exporter), and
# the server the package starts under systemd is stopped and disabled again.
if [ "$MODE" = test ] && ! command -v promtool >/dev/null 2>&1; then
	step "apt-get install prometheus (for promtool)" "about 30 s" apt_install --no-install-recommends prometheus
	if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled prometheus >/dev/null 2>&1; then
		$SUDO systemctl disable --now prometheus >&2 || true
	fi
fi

# The builds print their binary's path when it is cached already; only a real
# build is announced.
nomad_cached() { "$HERE/install-nomad.sh" --cached >/dev/null 2>&1; }
minio_cached() { "$HERE/install-minio.sh" --cached >/dev/null 2>&1; }
# make run builds Nomad in the background instead (nomad-background.sh).
if ! nomad_cached && [ -z "${MEDIAJOBS_NOMAD_BACKGROUND:-}" ]; then
	step "build Nomad v1.11.3 with its web UI into ~/.cache/mediajobs" "about 10 minutes on 2 cores" "$HERE/install-nomad.sh" >/dev/null
fi
if [ "$MODE" = test ] && ! "$HERE/install-mcp-inspector.sh" --cached >/dev/null 2>&1; then
	step "npm install @modelcontextprotocol/inspector-cli into ~/.cache/mediajobs" "about 20 s" "$HERE/install-mcp-inspector.sh" >/dev/null
fi
if { [ "$MODE" = test ] || [ "${MEDIAJOBS_STORAGE:-}" = s3 ]; } && ! minio_cached; then
	step "build MinIO into ~/.cache/mediajobs" "about 8 minutes on 2 cores" "$HERE/install-minio.sh" >/dev/null
fi
