package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/web"
)

// The contribute page offers the archive of the visitor's platform, told
// by navigator.userAgentData where the browser fills it and by the user
// agent string otherwise, with a one-line install naming this coordinator
// (and a join token in token mode); without downloads it says where they
// are.
func TestContributePageOffersTheVisitorsArchive(t *testing.T) {
	testenv.Long(t, "drives Chromium with macOS and Windows user agents")
	testbrowser.Chromium(t)
	dir := t.TempDir()
	var sums strings.Builder
	for _, p := range []string{"linux_amd64.tar.gz", "linux_arm64.tar.gz", "darwin_amd64.tar.gz", "darwin_arm64.tar.gz", "windows_amd64.zip", "windows_arm64.zip"} {
		name := "crowdtrain_v1.2.3_" + p
		body := []byte("archive " + p)
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	if err := os.WriteFile(filepath.Join(dir, web.SumsFile), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	site := func(downloads, mode string) *httptest.Server {
		pages, err := web.NewHandler(web.Options{Dist: fstest.MapFS{}, Logf: func(string, ...any) {}, Downloads: downloads})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/api/v1/join", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, `{"mode":%q}`, mode) })
		mux.Handle("/", pages)
		s := httptest.NewServer(mux)
		t.Cleanup(s.Close)
		return s
	}
	open, token := site(dir, "open"), site(dir, "token")
	bare := site("", "open")

	const (
		macUA = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
		winUA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
	)
	browser := testbrowser.New(t)
	for _, c := range []struct {
		name    string
		site    *httptest.Server
		ua      string
		meta    *emulation.UserAgentMetadata // nil: the user agent string alone
		state   string
		archive string
		command string
	}{
		{"macOS on Apple silicon (userAgentData)", open, macUA, &emulation.UserAgentMetadata{Platform: "macOS", Architecture: "arm", Bitness: "64"},
			"offer", "crowdtrain_v1.2.3_darwin_arm64.tar.gz", "curl -fsSL " + open.URL + "/install.sh | sh"},
		{"macOS on Intel (userAgentData)", open, macUA, &emulation.UserAgentMetadata{Platform: "macOS", Architecture: "x86", Bitness: "64"},
			"offer", "crowdtrain_v1.2.3_darwin_amd64.tar.gz", "curl -fsSL " + open.URL + "/install.sh | sh"},
		{"Windows x64 (user agent string)", open, winUA, nil,
			"offer", "crowdtrain_v1.2.3_windows_amd64.zip", "irm " + open.URL + "/install.ps1 | iex"},
		{"Windows x64, join tokens", token, winUA, nil,
			"offer", "crowdtrain_v1.2.3_windows_amd64.zip", "& ([scriptblock]::Create((irm " + token.URL + "/install.ps1))) -JoinToken YOUR_JOIN_TOKEN"},
		{"macOS, no downloads", bare, macUA, nil, "none", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testbrowser.NewTab(t, browser)
			override := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{UserAgent: c.ua, UserAgentMetadata: c.meta})
				return err
			})
			do(t, ctx, 30*time.Second, override, chromedp.Navigate(c.site.URL+"/"))
			state := ""
			deadline := time.Now().Add(20 * time.Second)
			for state == "" && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				state = get(t, ctx, chromedp.Evaluate[string](`document.getElementById('native').dataset.state || ''`))
			}
			platform := get(t, ctx, chromedp.Evaluate[string](`(() => { const d = document.getElementById('native').dataset; return d.os + '/' + d.arch })()`))
			if state != c.state {
				t.Fatalf("the page's offer is %q (platform %s), want %q", state, platform, c.state)
			}
			if c.state == "none" {
				if vis := get(t, ctx, chromedp.Evaluate[bool](`!document.getElementById('native-none').hidden && !!document.getElementById('native-none').textContent.match(/README/)`)); !vis {
					t.Error("without downloads the page does not say where they are")
				}
				return
			}
			href := get(t, ctx, chromedp.Evaluate[string](`document.getElementById('native-download').getAttribute('href')`))
			cmd := text(t, ctx, "#native-command")
			if href != "/downloads/"+c.archive || cmd != c.command {
				t.Errorf("platform %s: offers %s with %q; want /downloads/%s with %q", platform, href, cmd, c.archive, c.command)
			}
			others := text(t, ctx, "#native-list")
			if strings.Count(others, ",") != 4 {
				t.Errorf("the other platforms: %q, want the five others", others)
			}
		})
	}
}
