package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
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
// in examples and compute, the tab's own row marked; a new name
// reconnects and the leaderboard follows it.
func TestLeaderboardShowsVolunteerName(t *testing.T) {
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

// waitAdmin polls a condition on the admin page for up to a minute.
func waitAdmin(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (volunteers error %q)", what, text(t, ctx, "#volunteers-error"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// volunteerRow is a row of the admin page's volunteers table as shown.
type volunteerRow struct {
	ID, Name, Standing, Connected string
	Banned, BanShown, PardonShown bool
}

func adminVolunteer(t testing.TB, ctx context.Context, name string) (volunteerRow, bool) {
	t.Helper()
	js := get(t, ctx, chromedp.Evaluate[string](`JSON.stringify(Array.from(document.querySelectorAll('#volunteers tbody tr')).map((tr) => ({
		ID: tr.dataset.volunteerId, Name: tr.cells[0].textContent, Standing: tr.cells[7].textContent,
		Connected: tr.cells[9].textContent, Banned: tr.dataset.banned === '1',
		BanShown: !tr.querySelector('button.ban').hidden, PardonShown: !tr.querySelector('button.pardon').hidden})))`))
	var rows []volunteerRow
	if err := json.Unmarshal([]byte(js), &rows); err != nil {
		t.Fatalf("volunteer rows %q: %v", js, err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	return volunteerRow{}, false
}

// clickIn clicks the button matching sel in the volunteers row of id.
func clickIn(t testing.TB, ctx context.Context, id, sel string) {
	t.Helper()
	ok := get(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const tr = Array.from(document.querySelectorAll('#volunteers tbody tr')).find((r) => r.dataset.volunteerId === %q);
		const b = tr && tr.querySelector(%q);
		if (!b || b.hidden) return false;
		b.click(); return true })()`, id, sel)))
	if !ok {
		t.Fatalf("no visible %s in the row of volunteer %s", sel, id)
	}
}

// The admin page lists the volunteer a tab trains as; Ban (with a reason)
// bans it: the API's standing says so, the tab is dropped and shows the
// reason; Pardon lifts the ban and the tab trains again. The job shows
// its results by every ack reason.
func TestAdminBansAndPardonsVolunteer(t *testing.T) {
	s := newSite(t, longSpec(t, "mnist-mlp"))
	tab := testbrowser.New(t)
	admin := testbrowser.NewTab(t, tab)
	const name = "mallory"
	const reason = "forged results"

	do(t, tab, 30*time.Second, chromedp.Navigate(s.http.URL+"/"), chromedp.WaitVisible("#volunteer-name"))
	setInput(t, tab, "#volunteer-name", name)
	do(t, tab, 10*time.Second, chromedp.Click("#contribute"))
	s.waitFor("3 accepted updates from the tab", 2*time.Minute, func() bool {
		_, acc, _ := s.browserWorkers()
		return acc >= 3
	})

	do(t, admin, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, admin, "#token", adminToken)
	do(t, admin, 10*time.Second, chromedp.Click("#signin"))
	var row volunteerRow
	waitAdmin(t, admin, "the volunteer listed on the admin page", func() bool {
		r, ok := adminVolunteer(t, admin, name)
		row = r
		return ok && r.Connected == "1"
	})
	if row.Banned || !row.BanShown || row.PardonShown || !strings.Contains(row.Standing, "good standing") {
		t.Fatalf("before the ban the row reads %+v", row)
	}

	// Every ack reason is counted for the job, zeros included, as the API
	// says.
	waitAdmin(t, admin, "the job's results by ack reason", func() bool {
		return get(t, admin, chromedp.Evaluate[int](`document.querySelectorAll('#job-acks li').length`)) >= 5
	})
	acks := map[string]int64{}
	js := get(t, admin, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll('#job-acks li')).map((li) => [li.dataset.reason, Number(li.dataset.count)])))`))
	if err := json.Unmarshal([]byte(js), &acks); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"clipped", "quarantined", "banned", "rate_limited", "duplicate"} {
		if _, ok := acks[r]; !ok {
			t.Errorf("the job's ack reasons on the page lack %q: %v", r, acks)
		}
	}
	if v := s.view(); acks["clipped"] > v.Clipped {
		t.Errorf("the page shows %d clipped, the job has %d", acks["clipped"], v.Clipped)
	}

	clickIn(t, admin, row.ID, "button.ban")
	do(t, admin, 10*time.Second, chromedp.WaitVisible("#ban-reason"))
	setInput(t, admin, "#ban-reason", reason)
	do(t, admin, 10*time.Second, chromedp.Click("#ban-confirm"))
	s.waitFor("the ban in the API's standing", 30*time.Second, func() bool {
		v, ok := s.volunteerNamed(t, name)
		return ok && v.Banned
	})
	if v, _ := s.volunteerNamed(t, name); v.BanReason != reason || v.ID != row.ID {
		t.Errorf("the API's standing after the ban: %+v; want %s banned for %q", v, row.ID, reason)
	}
	s.waitFor("the banned tab to be dropped", 30*time.Second, func() bool { n, _, _ := s.browserWorkers(); return n == 0 })
	waitAdmin(t, admin, "the ban on the admin page", func() bool {
		r, _ := adminVolunteer(t, admin, name)
		return r.Banned && strings.Contains(r.Standing, reason) && r.PardonShown && !r.BanShown
	})
	writeArtifact(t, "admin-volunteers.png", get(t, admin, chromedp.FullScreenshot(100)))

	waitPage(t, tab, "the tab to say it is banned", func() bool {
		return text(t, tab, "#state") == "banned" && strings.Contains(text(t, tab, "#notice"), reason)
	})
	writeArtifact(t, "contribute-banned.png", get(t, tab, chromedp.FullScreenshot(100)))
	time.Sleep(2 * time.Second) // a tab retrying fast would be back by now
	if n, _, _ := s.browserWorkers(); n != 0 {
		t.Fatalf("%d browser workers connected while banned", n)
	}

	clickIn(t, admin, row.ID, "button.pardon")
	s.waitFor("the pardon in the API's standing", 30*time.Second, func() bool {
		v, ok := s.volunteerNamed(t, name)
		return ok && !v.Banned
	})
	waitAdmin(t, admin, "the pardon on the admin page", func() bool {
		r, _ := adminVolunteer(t, admin, name)
		return !r.Banned && r.BanShown && strings.Contains(r.Standing, "good standing")
	})

	// Pardoned, the tab trains again (Stop and Contribute rather than wait
	// for its once-a-minute retry).
	do(t, tab, 10*time.Second, chromedp.Click("#stop"))
	waitPage(t, tab, "Contribute to be enabled after Stop", func() bool {
		return get(t, tab, chromedp.Evaluate[bool](`!document.getElementById('contribute').disabled`))
	})
	do(t, tab, 10*time.Second, chromedp.Click("#contribute"))
	s.waitFor("the pardoned tab's updates accepted", 2*time.Minute, func() bool {
		n, acc, _ := s.browserWorkers()
		return n == 1 && acc > 0
	})
	waitPage(t, tab, "the tab training again", func() bool { return text(t, tab, "#state") == "training" })
}

// A coordinator that takes only volunteers with a join token: the
// operator issues one on the admin page, which shows its secret once with
// the link to give; a wrong token in the contribute page's link shows the
// coordinator's refusal; the issued one trains, as that token's volunteer;
// a revoked one is refused again.
func TestJoinTokenFromAdminToContribute(t *testing.T) {
	s := newSiteWith(t, longSpec(t, "mnist-mlp"), func(c *coordinator.Config) { c.Join = coordinator.JoinToken })
	tab := testbrowser.New(t)
	admin := testbrowser.NewTab(t, tab)

	do(t, admin, 30*time.Second, chromedp.Navigate(s.http.URL+"/admin"), chromedp.WaitVisible("#token"))
	setInput(t, admin, "#token", adminToken)
	do(t, admin, 10*time.Second, chromedp.Click("#signin"))
	do(t, admin, 30*time.Second, chromedp.WaitVisible("#token-name"))
	setInput(t, admin, "#token-name", "grace")
	do(t, admin, 10*time.Second, chromedp.Click("#issue-token"), chromedp.WaitVisible("#token-secret"))
	secret := strings.TrimSpace(text(t, admin, "#token-secret"))
	link := strings.TrimSpace(text(t, admin, "#token-link"))
	if secret == "" || link != s.http.URL+"/?token="+url.QueryEscape(secret) {
		t.Fatalf("issued token %q with link %q; want the secret and %s/?token=SECRET", secret, link, s.http.URL)
	}
	waitAdmin(t, admin, "the token listed", func() bool {
		return get(t, admin, chromedp.Evaluate[bool](`Array.from(document.querySelectorAll('#tokens tbody tr')).some((tr) => tr.cells[0].textContent === 'grace' && tr.cells[3].textContent === 'active')`))
	})
	writeArtifact(t, "admin-token-issued.png", get(t, admin, chromedp.FullScreenshot(100)))

	// A wrong token: the link fills the field (and leaves the address
	// bar), and the coordinator's refusal shows beside it.
	do(t, tab, 30*time.Second, chromedp.Navigate(s.http.URL+"/?token=not-a-token"), chromedp.WaitVisible("#join-token"))
	if v := get(t, tab, chromedp.Value("#join-token")); v != "not-a-token" {
		t.Errorf("the token field holds %q after a ?token= link", v)
	}
	if loc := get(t, tab, chromedp.Evaluate[string](`location.href`)); strings.Contains(loc, "token=") {
		t.Errorf("the token stays in the address bar: %s", loc)
	}
	do(t, tab, 10*time.Second, chromedp.Click("#contribute"))
	waitPage(t, tab, "the refused token's error", func() bool { return text(t, tab, "#token-error") != "" })
	t.Logf("refused: %q", text(t, tab, "#token-error"))
	writeArtifact(t, "contribute-token-refused.png", get(t, tab, chromedp.FullScreenshot(100)))
	if n, _, _ := s.browserWorkers(); n != 0 {
		t.Fatalf("%d browser workers joined with a wrong token", n)
	}

	// The issued token: typed in, the tab reconnects and trains.
	setInput(t, tab, "#join-token", secret)
	s.waitFor("updates from the tab with its token", 2*time.Minute, func() bool {
		_, acc, _ := s.browserWorkers()
		return acc >= 3
	})
	if got := localStorage(t, tab, "crowdtrain.joinToken"); got != secret {
		t.Errorf("crowdtrain.joinToken is %q, want the issued token", got)
	}
	waitPage(t, tab, "the error to clear", func() bool { return text(t, tab, "#token-error") == "" && text(t, tab, "#state") == "training" })
	var tokened bool
	for _, v := range s.standings(t) {
		if v.TokenName == "grace" && strings.HasPrefix(v.ID, "t-") && v.Examples >= 0 {
			tokened = true
		}
	}
	if !tokened {
		t.Errorf("no volunteer of token grace in the standing: %+v", s.standings(t))
	}

	// Revoked on the admin page: a new connection is refused.
	get(t, admin, chromedp.Evaluate[bool](`(() => { window.confirm = () => true;
		const tr = Array.from(document.querySelectorAll('#tokens tbody tr')).find((r) => r.cells[0].textContent === 'grace');
		tr.querySelector('button.revoke').click(); return true })()`))
	waitAdmin(t, admin, "the token shown revoked", func() bool {
		return get(t, admin, chromedp.Evaluate[bool](`Array.from(document.querySelectorAll('#tokens tbody tr')).some((tr) => tr.cells[0].textContent === 'grace' && tr.cells[3].textContent === 'revoked')`))
	})
	do(t, tab, 10*time.Second, chromedp.Click("#stop"))
	waitPage(t, tab, "Contribute to be enabled after Stop", func() bool {
		return get(t, tab, chromedp.Evaluate[bool](`!document.getElementById('contribute').disabled`))
	})
	do(t, tab, 10*time.Second, chromedp.Click("#contribute"))
	waitPage(t, tab, "the revoked token's error", func() bool { return text(t, tab, "#token-error") != "" })
	s.waitFor("no browser worker with a revoked token", 30*time.Second, func() bool { n, _, _ := s.browserWorkers(); return n == 0 })
}
