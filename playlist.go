package mediajobs

import (
	"bytes"
	"html"
	"path"
	"regexp"
	"strings"
)

// Published playlists and manifests (IsPlaylist) reach their segments, variant
// playlists and init segments by relative references, but every published file
// has a signed link of its own, with its signature in the query string (an S3
// link signs each object): a relative reference resolved against a signed link
// names a file without a signature. So a playlist is rewritten when it is
// downloaded (the gateway serves every playlist link, whatever the storage):
// each reference that names another output of the job becomes that output's
// signed link, valid as long as the playlist's own link. See docs/api.md.

// PlaylistLinks is what RewritePlaylist needs of the job: the signed link of one
// of its outputs by name (false when the job has no such output), and for a DASH
// segment template (media="seg-$Number$.m4s"), which names files no list can
// enumerate, a link to every output under a directory of outputs/ ("" for
// outputs/ itself): prefix + template + "?" + query.
type PlaylistLinks struct {
	Output func(name string) (string, bool)
	Dir    func(dir string) (prefix, query string, ok bool)
}

// hlsURIRe is a quoted URI attribute of an HLS tag (#EXT-X-MAP, #EXT-X-MEDIA,
// #EXT-X-I-FRAME-STREAM-INF, #EXT-X-KEY, #EXT-X-PART, ...).
var hlsURIRe = regexp.MustCompile(`(URI=")([^"]*)(")`)

// dashAttrRe is a DASH attribute that holds a URL: SegmentURL media, SegmentTemplate
// media and initialization, Initialization and RepresentationIndex sourceURL.
var dashAttrRe = regexp.MustCompile(`(\s(?:media|initialization|sourceURL|index)=")([^"]*)(")`)

// dashBaseRe is a BaseURL element.
var dashBaseRe = regexp.MustCompile(`(<BaseURL[^>]*>)([^<]*)(</BaseURL>)`)

// RewritePlaylist returns playlist name's body with each reference to another
// output replaced by its link: for HLS every URI line and URI="…" attribute, for
// DASH BaseURL elements and the media, initialization, sourceURL and index
// attributes (segment templates through links.Dir). A reference is resolved
// against the playlist's own directory; one that names no output of the job, is
// absolute, or leaves outputs/ is left as it is.
func RewritePlaylist(name string, body []byte, links PlaylistLinks) []byte {
	dir := path.Dir(name)
	if dir == "." {
		dir = ""
	}
	resolve := func(ref string) (string, bool) {
		if ref == "" || strings.ContainsAny(ref, "?#:\\") || strings.HasPrefix(ref, "/") {
			return "", false // a URL, an absolute path, or a query: not a job file
		}
		p := path.Clean(path.Join(dir, ref))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") {
			return "", false
		}
		return p, true
	}
	link := func(ref string) (string, bool) {
		if p, ok := resolve(ref); ok && links.Output != nil {
			return links.Output(p)
		}
		return "", false
	}
	if strings.EqualFold(path.Ext(name), ".mpd") {
		return rewriteDASH(body, link, resolve, links)
	}
	return rewriteHLS(body, link)
}

func rewriteHLS(body []byte, link func(string) (string, bool)) []byte {
	lines := bytes.SplitAfter(body, []byte("\n"))
	var out bytes.Buffer
	out.Grow(len(body) * 2)
	for _, l := range lines {
		content := bytes.TrimRight(l, "\r\n")
		eol := l[len(content):]
		text := strings.TrimSpace(string(content))
		switch {
		case text == "":
			out.Write(l)
		case strings.HasPrefix(text, "#"):
			if !strings.Contains(text, `URI="`) {
				out.Write(l)
				continue
			}
			out.WriteString(hlsURIRe.ReplaceAllStringFunc(string(content), func(m string) string {
				sub := hlsURIRe.FindStringSubmatch(m)
				if u, ok := link(sub[2]); ok {
					return sub[1] + u + sub[3]
				}
				return m
			}))
			out.Write(eol)
		default:
			if u, ok := link(text); ok {
				out.WriteString(u)
				out.Write(eol)
			} else {
				out.Write(l)
			}
		}
	}
	return out.Bytes()
}

func rewriteDASH(body []byte, link func(string) (string, bool), resolve func(string) (string, bool), links PlaylistLinks) []byte {
	value := func(raw string) (string, bool) {
		ref := html.UnescapeString(raw)
		if u, ok := link(ref); ok {
			return html.EscapeString(u), true
		}
		if !strings.Contains(ref, "$") || links.Dir == nil {
			return "", false
		}
		// A template: a link admitting every output under the template's directory,
		// with the template left in its path for the client to fill in.
		p, ok := resolve(strings.ReplaceAll(ref, "$", "D")) // "$" is no path character
		if !ok || strings.ContainsAny(ref, "/") && path.Dir(ref) != "." {
			return "", false // templates name files next to the manifest only
		}
		d := path.Dir(p)
		if d == "." {
			d = ""
		}
		prefix, query, ok := links.Dir(d)
		if !ok {
			return "", false
		}
		return html.EscapeString(prefix + ref + "?" + query), true
	}
	s := dashAttrRe.ReplaceAllStringFunc(string(body), func(m string) string {
		sub := dashAttrRe.FindStringSubmatch(m)
		if v, ok := value(sub[2]); ok {
			return sub[1] + v + sub[3]
		}
		return m
	})
	s = dashBaseRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := dashBaseRe.FindStringSubmatch(m)
		if u, ok := link(html.UnescapeString(strings.TrimSpace(sub[2]))); ok {
			return sub[1] + html.EscapeString(u) + sub[3]
		}
		return m
	})
	return []byte(s)
}
