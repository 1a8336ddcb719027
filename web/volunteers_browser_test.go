package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// standing is one row of GET /api/v1/volunteers/standing.
type standing struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	TokenName string   `json:"token_name"`
	Examples  int64    `json:"examples"`
	Flops     float64  `json:"flops"`
	Strikes   int      `json:"strikes"`
	Banned    bool     `json:"banned"`
	BanReason string   `json:"ban_reason"`
	Addresses []string `json:"addresses"`
	Connected int      `json:"connected"`
}

// credit is one row of the public GET /api/v1/volunteers.
type credit struct {
	Name     string  `json:"name"`
	Examples int64   `json:"examples"`
	Flops    float64 `json:"flops"`
}

// api calls the site's JSON API with the admin token and decodes the
// answer into out (when not nil); it fails t on any status but want.
func (s *site) api(t testing.TB, method, path string, body any, want int, out any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, s.http.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s %s, want %d", method, path, resp.Status, strings.TrimSpace(raw.String()), want)
	}
	if out != nil {
		if err := json.Unmarshal(raw.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, raw.String())
		}
	}
}

func (s *site) standings(t testing.TB) []standing {
	t.Helper()
	var body struct {
		Volunteers []standing `json:"volunteers"`
	}
	s.api(t, "GET", "/api/v1/volunteers/standing", nil, http.StatusOK, &body)
	return body.Volunteers
}

// volunteerNamed is the standing of the volunteer called name; ok is false
// when there is none.
func (s *site) volunteerNamed(t testing.TB, name string) (standing, bool) {
	t.Helper()
	for _, v := range s.standings(t) {
		if v.Name == name {
			return v, true
		}
	}
	return standing{}, false
}

// boardRow is a row of the contribute page's leaderboard as shown.
type boardRow struct {
	Rank     string `json:"rank"`
	Name     string `json:"name"`
	Examples string `json:"examples"`
	Flops    string `json:"flops"`
	Me       bool   `json:"me"`
}

func leaderboardRows(t testing.TB, ctx context.Context) []boardRow {
	t.Helper()
	js := get(t, ctx, chromedp.Evaluate[string](`JSON.stringify(Array.from(document.querySelectorAll('#leaderboard tbody tr')).map((tr) => ({
		rank: tr.cells[0].textContent, name: tr.querySelector('.name').textContent,
		examples: tr.cells[2].textContent, flops: tr.cells[3].textContent, me: tr.classList.contains('me')})))`))
	var rows []boardRow
	if err := json.Unmarshal([]byte(js), &rows); err != nil {
		t.Fatalf("leaderboard rows %q: %v", js, err)
	}
	return rows
}

// shownFlops reads "1.23 MFLOP" back as 1.23e6.
func shownFlops(s string) float64 {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return -1
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return -1
	}
	for i, u := range []string{"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"} {
		if u == unit {
			for range i {
				v *= 1000
			}
			return v
		}
	}
	return -1
}

func localStorage(t testing.TB, ctx context.Context, key string) string {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[string](fmt.Sprintf(`localStorage.getItem(%q) || ''`, key)))
}

// The contribute page: a display name checked by the coordinator's rules
// and kept; the volunteer key made once; the tab trains under that name,
// and the leaderboard shows the name (as text, never markup) with credit
// in examples and compute, the tab's own row marked, a volunteer without
// a name as "anonymous"; a new name reconnects and the leaderboard follows
// it.
func TestLeaderboardShowsVolunteerName(t *testing.T) {
	testenv.Long(t, "trains in Chromium")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ctx := testbrowser.New(t)
	do(t, ctx, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#volunteer-name"))

	// Names the coordinator would refuse are refused here, and not kept.
	// (A text field drops line breaks itself; a tab it keeps.)
	for _, bad := range []string{"right\u202eto left", strings.Repeat("é", 33), "tab\there"} {
		setInput(t, ctx, "#volunteer-name", bad)
		if msg := text(t, ctx, "#name-error"); msg == "" {
			t.Errorf("the name %q shows no error", bad)
		}
		if got := localStorage(t, ctx, "crowdtrain.name"); got != "" {
			t.Errorf("the refused name %q was kept as %q", bad, got)
		}
	}
	if msg := get(t, ctx, chromedp.Evaluate[string](`identity.nameProblem('two\nlines')`)); !strings.Contains(msg, "U+000A") {
		t.Errorf("a name with a newline: %q, want the control character named", msg)
	}
	// Markup in a name is text: the page must show it, not render it.
	const name = "Ada <b>&amp;</b> ✓"
	setInput(t, ctx, "#volunteer-name", name)
	if msg := text(t, ctx, "#name-error"); msg != "" {
		t.Fatalf("the name %q shows the error %q", name, msg)
	}
	if got := localStorage(t, ctx, "crowdtrain.name"); got != name {
		t.Fatalf("crowdtrain.name is %q, want %q", got, name)
	}

	do(t, ctx, 30*time.Second, chromedp.Reload(), chromedp.WaitVisible("#contribute"))
	if got := get(t, ctx, chromedp.Value("#volunteer-name")); got != name {
		t.Fatalf("after a reload the name field holds %q, want %q", got, name)
	}
	do(t, ctx, 10*time.Second, chromedp.Click("#contribute"))
	s.waitFor("5 accepted updates from the tab", 2*time.Minute, func() bool {
		_, acc, _ := s.browserWorkers()
		return acc >= 5
	})
	key := localStorage(t, ctx, "crowdtrain.volunteerKey")
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`).MatchString(key) {
		t.Errorf("crowdtrain.volunteerKey is %q, want 32 bytes in unpadded base64url", key)
	}
	if v, ok := s.volunteerNamed(t, name); !ok || !strings.HasPrefix(v.ID, "k-") || v.Connected != 1 {
		t.Errorf("the coordinator's standing for %q: %+v (found %v); want a key's volunteer (k-...) with 1 connection", name, v, ok)
	}

	var mine boardRow
	waitPage(t, ctx, "the tab's name on the leaderboard with credit", func() bool {
		for _, r := range leaderboardRows(t, ctx) {
			if r.Name == name {
				mine = r
				ex, _ := strconv.ParseInt(strings.ReplaceAll(r.Examples, ",", ""), 10, 64)
				return ex > 0 && shownFlops(r.Flops) > 0
			}
		}
		return false
	})
	if !mine.Me || mine.Rank == "" {
		t.Errorf("the tab's own row %+v is not marked as its own", mine)
	}
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#leaderboard b').length`)); n != 0 {
		t.Errorf("the name's markup was rendered (%d <b> elements in the leaderboard)", n)
	}
	var public struct {
		Volunteers []credit `json:"volunteers"`
	}
	s.api(t, "GET", "/api/v1/volunteers", nil, http.StatusOK, &public)
	found := false
	for _, c := range public.Volunteers {
		if c.Name == name {
			found = true
			if c.Examples <= 0 || c.Flops <= 0 {
				t.Errorf("the public credit of %q is %+v; want examples and compute above 0", name, c)
			}
		}
	}
	if !found {
		t.Errorf("GET /api/v1/volunteers lacks %q: %+v", name, public.Volunteers)
	}
	// A volunteer without a name (a native worker with no key, counted
	// by its address) is "anonymous" on the board, and not this tab's.
	stop := startNativeWorker(t, s.wsURL(), 1)
	waitPage(t, ctx, "an anonymous volunteer on the leaderboard", func() bool {
		for _, r := range leaderboardRows(t, ctx) {
			if r.Name == "anonymous" && !r.Me {
				return true
			}
		}
		return false
	})
	stop()
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#leaderboard .name.anonymous').length`)); n != 1 {
		t.Errorf("%d rows shown as anonymous, want the native worker's 1", n)
	}
	writeArtifact(t, "contribute-leaderboard.png", get(t, ctx, chromedp.FullScreenshot(100)))

	// A new name reconnects at once: the leaderboard moves the mark to it.
	const renamed = "Ada Lovelace"
	setInput(t, ctx, "#volunteer-name", renamed)
	s.waitFor("the coordinator to know the new name", time.Minute, func() bool {
		v, ok := s.volunteerNamed(t, renamed)
		return ok && v.Connected == 1
	})
	waitPage(t, ctx, "the new name marked on the leaderboard", func() bool {
		for _, r := range leaderboardRows(t, ctx) {
			if r.Name == renamed && r.Me {
				return true
			}
		}
		return false
	})
	if k := localStorage(t, ctx, "crowdtrain.volunteerKey"); k != key {
		t.Errorf("the volunteer key changed from %q to %q; it is made once", key, k)
	}
}
