#!/usr/bin/env bash
# Builds Nomad from the Go module proxy (there is no Debian package) and caches the
# binary outside the repo. Prints the binary's path (docs/operations.md).
#
# Built with the `ui` tag, so http://127.0.0.1:4646/ui/ serves the Nomad web UI
# (without it Nomad answers a stub page). The tags are part of the cached binary's
# name, so a binary built without the UI is never reused.
set -euo pipefail

VERSION="${NOMAD_VERSION:-1.11.3}"
API_VERSION="v0.0.0-20260907080526-08ef8f3d26da"
CACHE="${MEDIAJOBS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mediajobs}"
TAGS="ui"
BIN="$CACHE/nomad-$VERSION-${TAGS// /-}"

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
# --cached: only say whether it is built (exit 1 when not); build nothing.
case "${1:-}" in
--cached) exit 1 ;;
"") ;;
*) echo "usage: $0 [--cached]" >&2; exit 2 ;;
esac

mkdir -p "$CACHE"
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
echo "building nomad v$VERSION with its web UI (about 10 minutes on 2 cores, once)..." >&2
SRC="$(GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/nomad@v$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
cp -r "$SRC" "$WORK/nomad"
chmod -R u+w "$WORK/nomad"
cd "$WORK/nomad"
go mod edit -dropreplace github.com/hashicorp/nomad/api -require "github.com/hashicorp/nomad/api@$API_VERSION"
# -s -w: no symbol table or DWARF, which a dev agent does not need and whose
# generation is a good part of linking a binary this size.
GOFLAGS=-mod=mod go build -trimpath -tags "$TAGS" -ldflags "-s -w" -o "$BIN.tmp.$$" . >&2
mv "$BIN.tmp.$$" "$BIN"
echo "$BIN"
