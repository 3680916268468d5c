package chunked

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The packets' comparison sees the parameter sets: a chunk encoded with
// other settings (fewer reference frames: another SPS) than the first, whose
// header the stitched file keeps, differs from the stitched file's packets
// even though its slices are copied unchanged; with the same settings every
// chunk matches, in MP4 and Matroska alike.
func TestPacketFilterComparesParameterSets(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("cfr25")
	for _, c := range []struct {
		name, refs1, out string
		match1           bool
	}{
		{"same settings", "3", "same.mp4", true},
		{"same settings, Matroska", "3", "same.mkv", true},
		{"another SPS", "1", "other.mp4", false},
	} {
		var hashes []*ChunkHashes
		list := ""
		for i, refs := range []string{"3", c.refs1} {
			enc := fmt.Sprintf("chunks/%s_%d.nut", c.name[:4], i)
			r.run("-y", "-ss", fmt.Sprint(i), "-t", "1", "-i", "inputs/src.mp4", "-an", "-vf", "scale=96:-2",
				"-c:v", "libx264", "-preset", "veryfast", "-x264-params", "ref="+refs, "-f", "nut", enc)
			h, err := HashChunk(r.ctx, r.ffmpeg, "h264", filepath.Join(r.dir, enc))
			if err != nil || len(h.Packets) != 25 || h.PacketFilter != ChunkPacketFilter("h264") {
				t.Fatalf("%s: HashChunk %+v, %v", c.name, h, err)
			}
			hashes = append(hashes, h)
			list += "file '" + filepath.Base(enc) + "'\n"
		}
		if err := os.WriteFile(filepath.Join(r.dir, "chunks/list.txt"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		r.run("-y", "-f", "concat", "-safe", "0", "-i", "chunks/list.txt", "-c", "copy", "outputs/"+c.out)
		got, errs, err := packetHashes(r.ctx, r.ffmpeg, filepath.Join(r.dir, "outputs", c.out), PacketFilter("h264"), false)
		if err != nil || len(got) != 50 {
			t.Fatalf("%s: the stitched packets: %d, %v: %s", c.name, len(got), err, errs)
		}
		if !equal(got[:25], hashes[0].Packets) || equal(got[25:], hashes[1].Packets) != c.match1 {
			t.Errorf("%s: chunk 0 matches %v, chunk 1 %v; want true, %v", c.name, equal(got[:25], hashes[0].Packets), equal(got[25:], hashes[1].Packets), c.match1)
		}
	}
}
