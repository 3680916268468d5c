#!/usr/bin/env bash
# Builds Nomad from the Go module proxy (there is no Debian package) and caches the
# binary outside the repo. Prints the binary's path. See DESIGN.md §5.
set -euo pipefail

VERSION="${NOMAD_VERSION:-1.11.3}"
API_VERSION="v0.0.0-20260907080526-08ef8f3d26da"
CACHE="${MEDIAJOBS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mediajobs}"
BIN="$CACHE/nomad-$VERSION"

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
if command -v nomad >/dev/null 2>&1 && nomad version 2>/dev/null | grep -q "v$VERSION"; then
	command -v nomad; exit 0
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
echo "building nomad v$VERSION (a few minutes, once)..." >&2
SRC="$(GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/nomad@v$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
cp -r "$SRC" "$WORK/nomad"
chmod -R u+w "$WORK/nomad"
cd "$WORK/nomad"
go mod edit -dropreplace github.com/hashicorp/nomad/api -require "github.com/hashicorp/nomad/api@$API_VERSION"
GOFLAGS=-mod=mod go build -trimpath -o "$BIN.tmp" . >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
