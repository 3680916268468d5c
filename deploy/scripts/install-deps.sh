#!/usr/bin/env bash
# Installs what mediajobs needs on a fresh Debian machine: ffmpeg/ffprobe, curl,
# bubblewrap (the sandbox of raw_exec pools), chromium (the dashboard's browser
# test) and promtool (package prometheus) from Debian's packages (as root, or through sudo), and Nomad built from the Go
# module proxy (install-nomad.sh), and MinIO, the S3 server of the tests and of
# `MEDIAJOBS_STORAGE=s3 make run`, likewise (install-minio.sh). Prints nothing but progress on stderr.
set -euo pipefail

missing=()
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
command -v ffprobe >/dev/null 2>&1 || missing+=(ffmpeg)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# Headless Chromium drives the dashboard's browser test (chromedp).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	echo "installing ${missing[*]} with apt-get..." >&2
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get install -y -q "${missing[@]}" >&2 || {
		$SUDO apt-get update -q >&2
		$SUDO apt-get install -y -q "${missing[@]}" >&2
	}
fi

# promtool checks deploy/observability/alerts.yml in the tests. Debian ships it only
# in the prometheus package: installed without its recommends (node exporter), and
# the server the package starts under systemd is stopped and disabled again.
if ! command -v promtool >/dev/null 2>&1; then
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	echo "installing prometheus (for promtool) with apt-get..." >&2
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get install -y -q --no-install-recommends prometheus >&2 || {
		$SUDO apt-get update -q >&2
		$SUDO apt-get install -y -q --no-install-recommends prometheus >&2
	}
	if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled prometheus >/dev/null 2>&1; then
		$SUDO systemctl disable --now prometheus >&2 || true
	fi
fi

"$(dirname "$0")/install-nomad.sh" >/dev/null
"$(dirname "$0")/install-minio.sh" >/dev/null
