#!/usr/bin/env bash
# Builds the MinIO server (a real S3 for the tests and for `MEDIAJOBS_STORAGE=s3
# make run`) from the Go module proxy, as install-nomad.sh does for Nomad, and
# caches the binary outside the repo. Prints the binary's path; logs go to stderr.
#
# MinIO tags its releases RELEASE.<time>, which the module proxy knows only as the
# pseudo-version of the tagged commit: MINIO_RELEASE and MINIO_MODULE_VERSION
# must name the same commit (RELEASE.2025-09-07T16-13-09Z is commit 07c3a429bfed).
set -euo pipefail

RELEASE="${MINIO_RELEASE:-RELEASE.2025-09-07T16-13-09Z}"
MODULE_VERSION="${MINIO_MODULE_VERSION:-v0.0.0-20250907161309-07c3a429bfed}"
CACHE="${MEDIAJOBS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mediajobs}"
BIN="$CACHE/minio-$RELEASE"

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# --cached: only say whether it is built (exit 1 when not); build nothing.
case "${1:-}" in
--cached) exit 1 ;;
"") ;;
*) echo "usage: $0 [--cached]" >&2; exit 2 ;;
esac

mkdir -p "$CACHE"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "building minio $RELEASE (a few minutes, once)..." >&2
# The version the server reports (`minio --version`, its banner) comes from these
# variables, as MinIO's own release build sets them; without them it says
# DEVELOPMENT.GOGET.
commit="${MODULE_VERSION##*-}"
stamp="${RELEASE#RELEASE.}"
iso="${stamp:0:10}T${stamp:11:2}:${stamp:14:2}:${stamp:17:2}Z"
ldflags="-s -w"
ldflags+=" -X github.com/minio/minio/cmd.Version=$iso"
ldflags+=" -X github.com/minio/minio/cmd.ReleaseTag=$RELEASE"
ldflags+=" -X github.com/minio/minio/cmd.CommitID=$commit"
ldflags+=" -X github.com/minio/minio/cmd.ShortCommitID=$commit"
ldflags+=" -X github.com/minio/minio/cmd.CopyrightYear=${stamp:0:4}"
# go install writes into GOBIN under the command's name; a private GOBIN keeps a
# half-built binary out of the cache. MinIO's own go.mod names an older toolchain;
# the one on PATH builds it (GOTOOLCHAIN=local: nothing else is downloaded).
GOBIN="$WORK" CGO_ENABLED=0 GOTOOLCHAIN=local \
	go install -trimpath -ldflags="$ldflags" "github.com/minio/minio@$MODULE_VERSION" >&2
mv "$WORK/minio" "$BIN.tmp.$$"
mv "$BIN.tmp.$$" "$BIN"
echo "$BIN"
