package gateway

import (
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
)

// A playlist is whatever bytes the user's ffmpeg wrote under its name, so its
// rewriting is bounded: a playlist larger than maxPlaylistBytes is served as
// stored; at most maxPlaylistRefs references are rewritten (the rest stay as
// written; a day of 2-second segments is 43,200), each output's link is made
// once, and at most playlistRewrites run at once in a process (the others wait,
// within their request's deadline). A file of 2 MiB of one-letter references
// would otherwise grow a hundredfold, one signature per line.
const (
	maxPlaylistBytes = 2 << 20
	maxPlaylistRefs  = 50_000
)

var playlistRewrites = make(chan struct{}, 4)

// servePlaylist answers the download of a published playlist (mj.IsPlaylist) of
// a job with its references to the job's other outputs replaced by their signed
// links (mj.RewritePlaylist): the store's own for segments and init segments
// (S3's presigned URLs, so no segment passes through a gateway), this gateway's
// for nested playlists, which are rewritten in turn. Every link expires with the
// link the playlist was downloaded by. The view hands out this gateway's link for
// every playlist whatever the storage (blob.Links.Download), so this works for
// file and S3 storage alike. It reports false for any other file, which is then
// served as stored.
func (g *Gateway) servePlaylist(c *fiber.Ctx, key string) (bool, error) {
	rest, ok := strings.CutPrefix(key, "jobs/")
	at := strings.Index(key, "/outputs/")
	if !ok || at < 0 || !mj.IsPlaylist(key) {
		return false, nil
	}
	ctx := c.UserContext()
	id, _, _ := strings.Cut(rest, "/")
	find := func(j *mj.Job) *mj.Output {
		if j.Status != mj.StatusSucceeded {
			return nil
		}
		for i := range j.Outputs {
			if j.Outputs[i].Key == key {
				return &j.Outputs[i]
			}
		}
		return nil
	}
	j, err := g.job(ctx, id)
	if err == nil && find(j) == nil {
		j, err = g.Store.Job(ctx, id) // the cache may lag behind the job's success
	}
	switch {
	case mj.ErrorCode(err) == mj.ENotFound:
		return true, mj.Errorf(mj.ENotFound, "the file no longer exists")
	case err != nil:
		return true, err
	}
	self := find(j)
	if self == nil || self.Size > maxPlaylistBytes {
		return false, nil // not a published output (or too big to rewrite): as stored
	}
	f, _, err := g.Blobs.Open(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return true, mj.Errorf(mj.ENotFound, "the file no longer exists")
	}
	if err != nil {
		return true, err
	}
	body, err := io.ReadAll(io.LimitReader(f, maxPlaylistBytes))
	f.Close()
	if err != nil {
		return true, err
	}
	select {
	case playlistRewrites <- struct{}{}:
		defer func() { <-playlistRewrites }()
	case <-ctx.Done():
		return true, mj.Errorf(mj.EUnavailable, "too many playlists are being prepared; try again")
	}
	e, _ := strconv.ParseInt(c.Query("e"), 10, 64) // checked by fileKey
	exp := time.Unix(e, 0)
	keys := make(map[string]string, len(j.Outputs))
	for _, o := range j.Outputs {
		keys[o.Name] = o.Key
	}
	links := g.links()
	scope := key[:at+len("/outputs/")] // the attempt's outputs, all of them the job's
	made, refs := map[string]string{}, 0
	out := mj.RewritePlaylist(self.Name, body, mj.PlaylistLinks{
		Output: func(name string) (string, bool) {
			k, ok := keys[name]
			if !ok || refs >= maxPlaylistRefs {
				return "", false
			}
			refs++
			u, ok := made[name]
			if !ok {
				u = links.Download(ctx, k, exp)
				made[name] = u
			}
			return u, true
		},
		// A DASH segment template names files by pattern: a gateway link admitting
		// every output of the attempt, the template in its path.
		Dir: func(dir string) (string, string, bool) {
			if refs >= maxPlaylistRefs {
				return "", "", false
			}
			refs++
			sub := scope
			if dir != "" {
				sub += dir + "/"
			}
			u := g.Signer.URL("GET", scope, sub+"x", exp)
			base, query, ok := strings.Cut(u, "?")
			if !ok || !strings.HasSuffix(base, "/x") {
				return "", "", false
			}
			return strings.TrimSuffix(base, "x"), query, true
		},
	})
	c.Set(fiber.HeaderContentType, playlistType(key))
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentDisposition, blob.Attachment(path.Base(key)))
	// It holds links that expire: never kept by a cache past its own link.
	c.Set(fiber.HeaderCacheControl, "private, no-store")
	return true, c.Send(out)
}

// playlistType is the media type players expect of a playlist: HLS players and
// ffmpeg's HLS demuxer accept a URL without an .m3u8 ending by this type.
func playlistType(key string) string {
	if strings.EqualFold(path.Ext(key), ".mpd") {
		return "application/dash+xml"
	}
	return "application/vnd.apple.mpegurl"
}
