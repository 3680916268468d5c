#!/usr/bin/env bash
# build-local.sh [TAG]: builds the worker image (ffmpeg, ffprobe and the mediajobs
# runner) for tests and local Nomad docker-driver runs WITHOUT any registry: no
# base image is pulled. The root filesystem is assembled from
#   - mediajobs, built here (CGO_ENABLED=0, so static),
#   - the host's ffmpeg and ffprobe (from PATH) and every shared library ldd lists
#     for them, the dynamic loader included, at the paths ldd prints,
#   - /etc/ssl/certs/ca-certificates.crt, a minimal /etc/passwd, /etc/group
#     (root, nobody 65534) and /etc/nsswitch.conf, empty /tmp (1777) and /work,
#   - fontconfig's configuration (/etc/fonts, links resolved), the DejaVu fonts of
#     Debian's fonts-dejavu-core and a font cache made for them (/var/cache/fontconfig),
#     so drawtext and subtitles= work without a font file, as uid 65534 on a
#     read-only root (install-deps.sh installs fonts-dejavu-core),
# and loaded with `docker import`. TAG defaults to mediajobs-worker:local.
#
# The image carries a label mediajobs.sum (checksum of the mediajobs binary,
# ffmpeg/ffprobe and their libraries, and this script); when an image with TAG
# already has the same sum nothing is rebuilt. Prints TAG on stdout at the end;
# progress goes to stderr. Needs a running dockerd (deploy/scripts/start-dockerd.sh).
# Not for production: see Dockerfile and Dockerfile.nvidia next to this file.
set -euo pipefail
umask 022

TAG="${1:-mediajobs-worker:local}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
cd "$HERE/../.."

for t in go docker ldd tar sha256sum; do
	command -v "$t" >/dev/null 2>&1 || { echo "build-local.sh: $t not found in PATH" >&2; exit 1; }
done
FFMPEG="$(command -v ffmpeg || true)"
FFPROBE="$(command -v ffprobe || true)"
if [ -z "$FFMPEG" ] || [ -z "$FFPROBE" ]; then
	echo "build-local.sh: ffmpeg/ffprobe not found in PATH (deploy/scripts/install-deps.sh installs them)" >&2
	exit 1
fi
docker info >/dev/null 2>&1 || {
	echo "build-local.sh: docker does not answer; start it with deploy/scripts/start-dockerd.sh" >&2
	exit 1
}

# Concurrent builds (parallel test packages) of one tag would race on the tag;
# serialize them.
if command -v flock >/dev/null 2>&1; then
	LOCK="${TMPDIR:-/tmp}/mediajobs-build-local.$(printf '%s' "$TAG" | sha256sum | cut -c1-16).lock"
	exec 9>>"$LOCK"
	flock 9
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mediajobs-worker.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
ROOTFS="$WORK/rootfs"
mkdir -p "$ROOTFS/usr/local/bin" "$ROOTFS/usr/bin"
chmod 0755 "$WORK" "$ROOTFS"

echo "building mediajobs..." >&2
CGO_ENABLED=0 go build -trimpath -o "$ROOTFS/usr/local/bin/mediajobs" ./cmd/mediajobs

# The shared libraries (resolved paths, dynamic loader included) that the binaries need.
libs() {
	local bin out
	for bin in "$@"; do
		out="$(ldd "$bin")" || { echo "build-local.sh: ldd $bin failed" >&2; return 1; }
		if grep -q 'not found' <<<"$out"; then
			echo "build-local.sh: $bin has missing libraries:" >&2
			grep 'not found' <<<"$out" >&2
			return 1
		fi
		# "libx.so.1 => /path/libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)";
		# the vDSO has no path and is skipped.
		awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' <<<"$out"
	done | sort -u
}
mapfile -t LIBS < <(libs "$FFMPEG" "$FFPROBE")
[ ${#LIBS[@]} -gt 0 ] || { echo "build-local.sh: ldd listed no libraries for $FFMPEG" >&2; exit 1; }

# The default font family: fonts-dejavu-core's files (fontconfig's "sans-serif",
# "serif" and "monospace" on Debian).
if command -v dpkg >/dev/null 2>&1 && dpkg -L fonts-dejavu-core >/dev/null 2>&1; then
	mapfile -t FONTS < <(dpkg -L fonts-dejavu-core | grep -E '\.(ttf|otf)$')
else
	FONTS=()
	for f in DejaVuSans DejaVuSans-Bold DejaVuSansMono DejaVuSansMono-Bold DejaVuSerif DejaVuSerif-Bold; do
		FONTS+=("/usr/share/fonts/truetype/dejavu/$f.ttf")
	done
fi
for f in "${FONTS[@]}" /etc/fonts/fonts.conf; do
	[ -f "$f" ] || {
		echo "build-local.sh: $f not found; drawtext and subtitles= need fontconfig and a font (apt-get install fontconfig-config fonts-dejavu-core, or deploy/scripts/install-deps.sh)" >&2
		exit 1
	}
done

# What the image is made of; libraries by path, size and mtime (cheap, and an
# upgrade changes them), the binaries by content.
SUM="$(
	{
		sha256sum "$ROOTFS/usr/local/bin/mediajobs" | cut -d' ' -f1
		echo "$FFMPEG $FFPROBE"
		sha256sum "$(readlink -f "$FFMPEG")" "$(readlink -f "$FFPROBE")" "$SELF"
		for l in "${LIBS[@]}" "${FONTS[@]}"; do echo "$l $(stat -L -c '%s %Y' "$l")"; done
		find -L /etc/fonts -type f -printf '%p %s %T@\n' | sort
	} | sha256sum | cut -c1-32
)"

if old="$(docker image inspect -f '{{ index .Config.Labels "mediajobs.sum" }}' "$TAG" 2>/dev/null)" && [ "$old" = "$SUM" ]; then
	echo "image $TAG is up to date (mediajobs.sum=$SUM), not rebuilding" >&2
	echo "$TAG"
	exit 0
fi
OLD_ID="$(docker image inspect -f '{{ .Id }}' "$TAG" 2>/dev/null || true)"

echo "assembling the root filesystem..." >&2
# Keep the host's merged-/usr layout (/lib -> usr/lib etc.) so that files copied
# to the paths ldd prints land where the loader looks for them.
# Links are made relative (an absolute one would point into the host while we copy)
# and their targets created, so that copies through them land inside the rootfs.
for d in bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$d" ]; then
		target="$(readlink "/$d")"
		target="${target#/}"
		case "$target" in
		*..*) continue ;; # unusual layout: leave it a plain directory
		esac
		mkdir -p "$ROOTFS/$target"
		ln -s "$target" "$ROOTFS/$d"
	fi
done

# cp -L: a symlink path (libfoo.so.1 -> libfoo.so.1.2.3) becomes a real file at that path.
copy_file() {
	local src="$1" dst="$ROOTFS$1"
	mkdir -p "$(dirname "$dst")"
	cp -L --preserve=mode "$src" "$dst"
}
cp -L --preserve=mode "$FFMPEG" "$ROOTFS/usr/bin/ffmpeg"
cp -L --preserve=mode "$FFPROBE" "$ROOTFS/usr/bin/ffprobe"
for l in "${LIBS[@]}"; do copy_file "$l"; done

mkdir -p "$ROOTFS/etc/ssl/certs" "$ROOTFS/tmp" "$ROOTFS/work" "$ROOTFS/root"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	cp -L /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
else
	echo "build-local.sh: warning: no /etc/ssl/certs/ca-certificates.crt on this host (apt-get install ca-certificates); the image will have no CA bundle" >&2
fi
chmod 1777 "$ROOTFS/tmp"
# The job's directory is /job to ffmpeg on every driver (bubblewrap binds it
# there on raw_exec): here it is the allocation's work directory, which the
# jobspec's tasks share, so absolute /job/... paths (concat lists) resolve alike.
ln -s /alloc/work "$ROOTFS/job"
chmod 0700 "$ROOTFS/root"
cat >"$ROOTFS/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$ROOTFS/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nobody:x:65534:
EOF
echo 'hosts: files dns' >"$ROOTFS/etc/nsswitch.conf"

# fontconfig: its configuration (conf.d's links to /usr/share/fontconfig resolved
# into files), the fonts, and a cache made for them now, so that ffmpeg's
# fontconfig finds a valid cache on the read-only root and writes none of its own
# (were one missing, it would only write under HOME, the job's directory).
cp -rL /etc/fonts "$ROOTFS/etc/fonts"
for f in "${FONTS[@]}"; do copy_file "$f"; done
mkdir -p "$ROOTFS/var/cache/fontconfig"
# A cache is valid for its directory's mtime to the nanosecond, and the tar below
# keeps whole seconds: round the font directories' mtimes first.
find "$ROOTFS/usr/share/fonts" -type d -exec touch -m -d "@$(date +%s)" {} +
if command -v fc-cache >/dev/null 2>&1; then
	fc-cache --sysroot="$ROOTFS" --force --system-only >&2 ||
		echo "build-local.sh: warning: fc-cache failed; fontconfig will scan the fonts on each run" >&2
else
	echo "build-local.sh: warning: no fc-cache on this host (package fontconfig); fontconfig will scan the fonts on each run" >&2
fi

echo "importing $TAG..." >&2
tar -C "$ROOTFS" --numeric-owner --owner=0 --group=0 -c . |
	docker import \
		--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
		--change 'WORKDIR /' \
		--change 'USER 65534:65534' \
		--change "LABEL mediajobs.sum=$SUM" \
		- "$TAG" >/dev/null

# The image the tag pointed at before is now untagged; drop it unless in use.
NEW_ID="$(docker image inspect -f '{{ .Id }}' "$TAG")"
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$NEW_ID" ]; then
	docker image rm "$OLD_ID" >/dev/null 2>&1 || true
fi

echo "$TAG"
