package web_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// lastColumnProblems lists, for every table the admin page shows, each
// row whose last cell (or a visible button in it: Ban, Disconnect,
// Revoke) a user at this window size cannot see: outside the window, or
// hidden by the table's scroll box. The page is scrolled vertically to
// each one, never sideways.
const lastColumnProblems = `(() => {
  const problems = [];
  if (document.documentElement.scrollWidth > window.innerWidth) {
    problems.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a ' + window.innerWidth + ' px window');
  }
  for (const table of document.querySelectorAll('#admin table')) {
    if (table.offsetParent === null) continue;
    Array.from(table.rows).forEach((tr, i) => {
      const cell = tr.cells[tr.cells.length - 1];
      const buttons = Array.from(cell.querySelectorAll('button')).filter((b) => b.offsetParent !== null);
      for (const el of buttons.length ? buttons : [cell]) {
        window.scrollTo(0, window.scrollY + el.getBoundingClientRect().top - window.innerHeight / 2);
        const r = el.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        const what = '#' + table.id + ' row ' + i + ' ' + (el === cell ? 'last cell' : 'button ' + el.textContent);
        // The nearest box that clips it sideways (the table's scroll box).
        let clip = null;
        for (let a = el.parentElement; a && !clip; a = a.parentElement) {
          if (getComputedStyle(a).overflowX !== 'visible') clip = a;
        }
        const cr = clip && clip.getBoundingClientRect();
        const clipLeft = clip ? cr.left + clip.clientLeft : 0;
        const clipRight = clip ? clipLeft + clip.clientWidth : window.innerWidth;
        if (r.width === 0 || r.left < 0 || r.right > window.innerWidth) {
          problems.push(what + ' spans x ' + Math.round(r.left) + '..' + Math.round(r.right) + ' in a ' + window.innerWidth + ' px window');
        } else if (r.left < clipLeft - 0.5 || r.right > clipRight + 0.5) {
          problems.push(what + ' spans x ' + Math.round(r.left) + '..' + Math.round(r.right) + ', cut by its scroll box at ' + Math.round(clipLeft) + '..' + Math.round(clipRight));
        } else if (!hit || !(el === hit || el.contains(hit))) {
          problems.push(what + ' is covered or clipped (' + (hit ? hit.tagName + '.' + hit.className : 'nothing') + ' at its centre)');
        }
      }
    });
  }
  window.scrollTo(0, 0);
  return JSON.stringify(problems);
})()`

// At 1280x800, a common laptop window, every table's last column shows:
// the Ban, Disconnect and Revoke buttons are on screen without scrolling
// sideways. A screenshot of the workers and volunteers tables is kept.
func TestAdminTablesFitA1280PixelWindow(t *testing.T) {
	testenv.Long(t, "drives the admin page in Chromium beside a relay")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	relayWS, _ := startRelay(t, s, "relay-one")
	stopBehind := startNativeWorker(t, relayWS, 1)
	defer stopBehind()
	stop := startNativeWorker(t, s.wsURL(), 1)
	defer stop()

	ctx := testbrowser.New(t)
	do(t, ctx, 10*time.Second, chromedp.EmulateViewport(1280, 800))
	signInAdmin(t, ctx, s)
	setInput(t, ctx, "#token-name", "a volunteer with a rather long name")
	do(t, ctx, 10*time.Second, chromedp.Click("#issue-token"), chromedp.WaitVisible("#token-secret"))
	rows := func(sel string) int {
		return get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+sel+` tbody tr').length`))
	}
	waitAdmin(t, ctx, "a row in every table", func() bool {
		return rows("#jobs") > 0 && rows("#workers") > 0 && rows("#relays") > 0 && rows("#volunteers") > 0 && rows("#tokens") > 0 &&
			strings.Contains(text(t, ctx, "#workers tbody tr"), "MB")
	})
	if w := get(t, ctx, chromedp.Evaluate[int](`window.innerWidth`)); w != 1280 {
		t.Fatalf("the window is %d px wide, want 1280", w)
	}

	var problems []string
	if err := json.Unmarshal([]byte(get(t, ctx, chromedp.Evaluate[string](lastColumnProblems))), &problems); err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}

	get(t, ctx, chromedp.Evaluate[bool](`(() => { document.getElementById('workers-title').scrollIntoView(); return true })()`))
	writeArtifact(t, "admin-1280-workers.png", get(t, ctx, chromedp.CaptureScreenshot()))
	get(t, ctx, chromedp.Evaluate[bool](`(() => { document.getElementById('volunteers-title').scrollIntoView(); return true })()`))
	writeArtifact(t, "admin-1280-volunteers.png", get(t, ctx, chromedp.CaptureScreenshot()))
}
