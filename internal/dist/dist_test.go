package dist

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The same files give the same archive bytes whatever the time of day, and
// the archive holds them in order, with their modes, owned by nobody.
func TestArchivesAreReproducible(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	files := []file{{name: "crowdtrain", mode: 0o755, data: bytes.Repeat([]byte("binary"), 1000)}, {name: "README.md", mode: 0o644, data: []byte("# read me\n")}}
	for _, target := range []Target{{"linux", "arm64"}, {"windows", "amd64"}} {
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		if err := writeArchive(a, target, files, at); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // a second later: the clock must not get in
		if err := writeArchive(b, target, files, at); err != nil {
			t.Fatal(err)
		}
		ba, _ := os.ReadFile(a)
		bb, _ := os.ReadFile(b)
		if !bytes.Equal(ba, bb) {
			t.Errorf("%s: two archives of the same files differ", target)
		}
		got := readArchive(t, a, target)
		if len(got) != 2 || got[0].name != "crowdtrain" || got[1].name != "README.md" {
			t.Fatalf("%s: entries %v, want crowdtrain then README.md", target, got)
		}
		for i, f := range got {
			if !bytes.Equal(f.data, files[i].data) || f.mode != files[i].mode {
				t.Errorf("%s: %s: %d bytes mode %v, want %d bytes mode %v", target, f.name, len(f.data), f.mode, len(files[i].data), files[i].mode)
			}
			if !f.at.Equal(at) {
				t.Errorf("%s: %s: time %v, want %v", target, f.name, f.at, at)
			}
		}
	}
}

// entry is an archive entry as read back.
type entry struct {
	file
	at time.Time
}

// readArchive reads a .tar.gz or .zip back, checking that tar entries name
// no owner.
func readArchive(t *testing.T, path string, target Target) []entry {
	t.Helper()
	var out []entry
	if target.OS == "windows" {
		z, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		for _, f := range z.File {
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, entry{file{f.Name, f.Mode().Perm(), b}, f.Modified.UTC()})
		}
		return out
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	gz, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", gz.Name, gz.ModTime)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q, want none", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{file{h.Name, os.FileMode(h.Mode).Perm(), b}, h.ModTime.UTC()})
	}
	return out
}

// SHA256SUMS is sha256sum's format, and sha256sum -c accepts it when the
// host has sha256sum; ParseSums reads it back and names a bad line.
func TestSumsFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"b.zip": "bee", "a.tar.gz": "ay"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteSums(dir, []string{"b.zip", "a.tar.gz"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	// sha256("ay"), sha256("bee") as coreutils prints them, sorted by name.
	want := "69d61997a241e97931db9dd1cfcef218041a752485f5f7956b09766287682da3  a.tar.gz\n" +
		"62cb81b5904a262ffaeed02abef36bfc540b09f964b8b0b636662f77ffce6714  b.zip\n"
	if string(raw) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", raw, want)
	}
	if sha, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command(sha, "-c", SumsFile)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
	}
	sums, err := ParseSums(bytes.NewReader(raw))
	if err != nil || len(sums) != 2 || sums["b.zip"] != "62cb81b5904a262ffaeed02abef36bfc540b09f964b8b0b636662f77ffce6714" {
		t.Errorf("ParseSums: %v, %v", sums, err)
	}
	for _, bad := range []string{"abc  x.zip\n", strings.Repeat("z", 64) + "  x.zip\n", strings.Repeat("a", 64) + "x.zip\n"} {
		if _, err := ParseSums(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("ParseSums(%q): %v, want an error naming line 1", bad, err)
		}
	}
}

func TestTargets(t *testing.T) {
	for s, want := range map[string]string{
		"linux/amd64": "crowdtrain_v1.2.3_linux_amd64.tar.gz", "darwin/arm64": "crowdtrain_v1.2.3_darwin_arm64.tar.gz",
		"windows/arm64": "crowdtrain_v1.2.3_windows_arm64.zip",
	} {
		tg, err := ParseTarget(s)
		if err != nil || tg.ArchiveName("v1.2.3") != want {
			t.Errorf("%s: %q, %v; want %s", s, tg.ArchiveName("v1.2.3"), err, want)
		}
	}
	if _, err := ParseTarget("plan9/386"); err == nil || !strings.Contains(err.Error(), "linux/amd64") {
		t.Errorf("plan9/386: %v, want an error listing the targets", err)
	}
	if _, err := Build(t.Context(), Options{Version: "../x", Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("version ../x: %v, want refused", err)
	}
}
