#!/usr/bin/env bash
# Installs the MCP reference inspector's CLI (@modelcontextprotocol/inspector-cli,
# from npm; it runs on Node 20) into the project's cache, for the test that lists
# `mediajobs mcp`'s tools with it. Prints the path of its entry point (node runs it).
set -euo pipefail

VERSION="${MCP_INSPECTOR_VERSION:-1.0.3}"
CACHE="${MEDIAJOBS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mediajobs}"
DIR="$CACHE/mcp-inspector-cli-$VERSION"
ENTRY="$DIR/node_modules/@modelcontextprotocol/inspector-cli/build/index.js"

if [ -f "$ENTRY" ]; then echo "$ENTRY"; exit 0; fi
case "${1:-}" in
--cached) exit 1 ;;
"") ;;
*) echo "usage: $0 [--cached]" >&2; exit 2 ;;
esac

command -v npm >/dev/null 2>&1 || { echo "npm is needed (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/mcp-inspector.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
npm install --prefix "$TMP" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/inspector-cli@$VERSION" >&2
rm -rf "$DIR"
mv "$TMP" "$DIR"
echo "$ENTRY"
