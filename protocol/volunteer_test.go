package protocol

import (
	"reflect"
	"strings"
	"testing"
	"unicode"
)

func TestCheckVolunteerKeyAndName(t *testing.T) {
	for _, k := range []string{strings.Repeat("a", MinVolunteerKey), "AZaz09-_AZaz09-_AZaz09", strings.Repeat("x", MaxShortText)} {
		if err := CheckVolunteerKey(k); err != nil {
			t.Errorf("key %q: %v", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("a", MinVolunteerKey-1), strings.Repeat("a", MaxShortText+1), "abcdefghijklmnopqrstu=v", "abcdefghijklmnopqrstuvé"} {
		if err := CheckVolunteerKey(k); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	for _, n := range []string{"", "Alice", "数据 志愿者", "O'Brien & co."} {
		if err := CheckVolunteerName(n); err != nil {
			t.Errorf("name %q: %v", n, err)
		}
	}
	for _, n := range []string{"a\nb", "a\u202eb", "\x1b[2J", strings.Repeat("x", MaxVolunteerName+1), "\xff"} {
		if err := CheckVolunteerName(n); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}

// A hello with the volunteer fields decodes only when they are valid:
// whatever decodes has a key of the allowed alphabet and length and a
// name without control or format characters, and round-trips unchanged.
func FuzzHelloVolunteer(f *testing.F) {
	base := Hello{Protocol: Version, Kind: KindBrowser, Backend: "wasm", Threads: 1, Client: "test", Codecs: []string{CodecF32}}
	for _, h := range []Hello{
		{Token: "0123456789ab.c2VjcmV0", VolunteerKey: strings.Repeat("k", 43), Name: "Alice"},
		{VolunteerKey: strings.Repeat("k", 21), Name: "a\nb"},
		{Name: "\u202egnp.exe"},
		{VolunteerKey: strings.Repeat("_", 129)},
	} {
		m := base
		m.Token, m.VolunteerKey, m.Name = h.Token, h.VolunteerKey, h.Name
		b, err := Encode(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, 1<<16)
		if err != nil {
			return
		}
		h, ok := m.(*Hello)
		if !ok {
			return
		}
		if h.VolunteerKey != "" && CheckVolunteerKey(h.VolunteerKey) != nil {
			t.Fatalf("decoded a hello with an invalid key %q", h.VolunteerKey)
		}
		for _, r := range h.Name {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("decoded a hello whose name holds %U", r)
			}
		}
		if len(h.Name) > MaxVolunteerName || len(h.Token) > 2*MaxShortText {
			t.Fatalf("decoded a hello with a name of %d bytes, a token of %d", len(h.Name), len(h.Token))
		}
		b2, err := Encode(h)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(b2, 1<<16)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, m, m2)
		}
	})
}
