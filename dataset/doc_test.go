package dataset

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// docs/PROTOCOL.md shows two shards byte by byte for people writing
// workers; they are what AppendShard writes and they decode to the
// examples the text describes.
func TestProtocolDocShardsMatchEncode(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	var shown [][]byte
	for _, block := range strings.Split(string(doc), "```shard\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		b, err := hex.DecodeString(strings.Join(strings.Fields(block), ""))
		if err != nil {
			t.Fatalf("docs/PROTOCOL.md shard block %q: %v", block, err)
		}
		shown = append(shown, b)
	}
	if len(shown) != 2 {
		t.Fatalf("docs/PROTOCOL.md shows %d shard blocks, want 2", len(shown))
	}
	px := &Set{Elem: Pixels, Kind: ClassLabels, Shape: []int{1, 2, 2}, Classes: 10, N: 2, U8: []byte{0, 255, 128, 7, 1, 2, 3, 4}, Labels: []int32{3, 9}}
	text, _, err := TextSplits("t", "dataset.path", []byte("In the beginning God created"), 4, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{EncodeShard(px, Shard{Indices: []int{0, 1}}), EncodeShard(text, Shard{Indices: []int{0, 2}})}
	for i := range want {
		if !bytes.Equal(shown[i], want[i]) {
			t.Errorf("docs/PROTOCOL.md shard %d is\n%x\nbut AppendShard writes\n%x", i+1, shown[i], want[i])
		}
		if _, err := DecodeShard(shown[i], 10); err != nil {
			t.Errorf("docs/PROTOCOL.md shard %d does not decode: %v", i+1, err)
		}
	}
	if !strings.Contains(string(doc), "/shards/v2/") {
		t.Error("docs/PROTOCOL.md does not name the format-2 shard URL")
	}
}
