package polite

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestOthersShareLeavesOutOurOwn(t *testing.T) {
	prev := cpuTimes{busy: 1000, total: 4000, own: 100}
	// 400 ticks of 800 busy, 300 of them ours: others used 100 of 800.
	share, ok := othersShare(prev, cpuTimes{busy: 1400, total: 4800, own: 400})
	if !ok || share != 0.125 {
		t.Errorf("share %v (ok %v), want 0.125", share, ok)
	}
	if _, ok := othersShare(prev, prev); ok {
		t.Error("a share over no time at all")
	}
	// Our own counted from another clock can exceed the busy time seen:
	// the share is never negative.
	if share, _ := othersShare(prev, cpuTimes{busy: 1010, total: 4100, own: 200}); share != 0 {
		t.Errorf("share %v, want 0", share)
	}
}

func TestJudge(t *testing.T) {
	o := Options{}.withDefaults()
	for _, c := range []struct {
		share   float64
		shareOK bool
		in      input
		idle    bool
		says    string
	}{
		{0.1, false, input{}, false, "measuring"},
		{0.1, true, input{known: true, ago: 10 * time.Second, where: "on /dev/pts/3"}, false, "input 10s ago on /dev/pts/3 (idle means none for 3m0s)"},
		{0.6, true, input{known: true, ago: time.Hour}, false, "other programs use 60% of the CPUs (idle means at most 25%)"},
		{0.2, true, input{known: true, ago: 5 * time.Minute}, true, "other programs use 20% of the CPUs; no input for 5m0s"},
		{0.2, true, input{}, true, "no input to watch"},
	} {
		idle, why := judge(o, c.share, c.shareOK, c.in)
		if idle != c.idle || !strings.Contains(why, c.says) {
			t.Errorf("judge(%v, %v, %+v) = %v, %q; want %v saying %q", c.share, c.shareOK, c.in, idle, why, c.idle, c.says)
		}
	}
}

func TestParsers(t *testing.T) {
	busy, total, err := parseProcStat([]byte("cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n"))
	if err != nil || busy != 161 || total != 1181 {
		t.Errorf("parseProcStat = %v, %v, %v; want 161, 1181", busy, total, err)
	}
	if _, _, err := parseProcStat([]byte("intr 1 2 3")); err == nil {
		t.Error("parseProcStat took a file without the cpu line")
	}
	own, err := parseSelfStat([]byte("4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0 99 1000 10\n"))
	if err != nil || own != 42 {
		t.Errorf("parseSelfStat = %v, %v; want 37+5", own, err)
	}
	ioreg := []byte("+-o IOHIDSystem  <class IOHIDSystem>\n    {\n      \"HIDIdleTime\" = 4500000000\n      \"HIDParameters\" = {}\n")
	if d, err := parseHIDIdle(ioreg); err != nil || d != 4500*time.Millisecond {
		t.Errorf("parseHIDIdle = %v, %v; want 4.5s", d, err)
	}
	if _, err := parseHIDIdle([]byte("nothing")); err == nil || !strings.Contains(err.Error(), "HIDIdleTime") {
		t.Errorf("parseHIDIdle without the key: %v", err)
	}
	var la [24]byte
	binary.LittleEndian.PutUint32(la[0:], 3072) // 1.5 at scale 2048
	binary.LittleEndian.PutUint64(la[16:], 2048)
	for _, b := range [][]byte{la[:], la[:23]} { // syscall.Sysctl drops a final zero
		if v, err := parseLoadavg(b); err != nil || v != 1.5 {
			t.Errorf("parseLoadavg(%d bytes) = %v, %v; want 1.5", len(b), v, err)
		}
	}
	if _, err := parseLoadavg(la[:8]); err == nil {
		t.Error("parseLoadavg took 8 bytes")
	}
}

// The detectors of the other systems build (they can only run there).
func TestDetectorsBuildForEveryOS(t *testing.T) {
	for _, target := range []string{"darwin/arm64", "windows/amd64", "freebsd/amd64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		cmd := exec.Command("go", "vet", ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s GOARCH=%s go vet: %v\n%s", goos, goarch, err, out)
		}
	}
}
