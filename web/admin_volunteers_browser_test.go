package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

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
	testenv.Long(t, "drives the admin page in Chromium")
	// Hellos refused as banned, counted from the coordinator's log.
	var refusals atomic.Int64
	s := newSiteWith(t, longSpec(t, "mnist-mlp"), func(c *coordinator.Config) {
		logf := c.Logf
		c.Logf = func(format string, args ...any) {
			if strings.Contains(fmt.Sprintf(format, args...), "refused (banned)") {
				refusals.Add(1)
			}
			logf(format, args...)
		}
	})
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
	// Counts only grow, and the page's are a moment older than the API's.
	v := s.view()
	for r, n := range acks {
		want := v.Rejections[r]
		if r == "clipped" {
			want = v.Clipped
		}
		if n < 0 || n > want {
			t.Errorf("the page counts %d %s results, the job %d", n, r, want)
		}
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
	// The tab was refused once and asks again only after a minute: a
	// reconnect with the usual backoff (0.5 s, then 1 s, 2 s...) would
	// have been refused again within these 3 s.
	asked := refusals.Load()
	time.Sleep(3 * time.Second)
	if n, _, _ := s.browserWorkers(); n != 0 || asked == 0 || refusals.Load() != asked {
		t.Fatalf("banned: %d browser workers connected, hellos refused %d times, then %d after 3 s; want none connected and one refusal",
			n, asked, refusals.Load())
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
	testenv.Long(t, "drives the admin and contribute pages in Chromium")
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
