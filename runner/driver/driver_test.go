package driver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

// An argv list crosses the pipe as it is: no word is split, joined or quoted.
func TestArgvCrossesWhole(t *testing.T) {
	argvs := [][]string{
		{"/usr/bin/ffmpeg", "-i", "in put.mp4", "-vf", "drawtext=text='a;b' $(id)", "", "out\nput.mp4", "x\x00y", "é"},
		{"/usr/bin/ffmpeg"},
	}
	var buf bytes.Buffer
	for _, a := range argvs {
		if err := WriteArgv(&buf, a); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, want := range argvs {
		got, err := readArgv(r)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	if _, err := readArgv(r); err == nil {
		t.Fatal("read past the end")
	}
}

func TestStatusCrossesWhole(t *testing.T) {
	for _, st := range []Status{{Code: 0}, {Code: 3}, {Code: -1, Signal: 9}, {Code: -1, Start: "no such file"}} {
		got, err := DecodeStatus(st.encode())
		if err != nil || got != st {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, st)
		}
	}
	if _, err := DecodeStatus([]byte{1, 2}); err == nil {
		t.Fatal("a short status decoded")
	}
}

// A frame longer than MaxFrame is refused before it is read.
func TestReadFrameBounded(t *testing.T) {
	var buf bytes.Buffer
	f := &frameWriter{w: &buf}
	f.write(FrameStderr, []byte("ok"))
	buf.Write(binary.BigEndian.AppendUint32([]byte{FrameStderr}, MaxFrame+1))
	r := bufio.NewReader(&buf)
	if k, b, err := ReadFrame(r); err != nil || k != FrameStderr || string(b) != "ok" {
		t.Fatalf("frame %q %q %v", k, b, err)
	}
	if _, _, err := ReadFrame(r); err == nil {
		t.Fatal("a frame past MaxFrame was read")
	}
}
