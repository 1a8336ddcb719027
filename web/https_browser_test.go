package web_test

import (
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crowdtrain/crowdtrain/internal/testbrowser"
	"github.com/crowdtrain/crowdtrain/internal/testcert"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// A tab on the contribute page served over https (a certificate of a test
// CA, trusted by Chromium through its public key hash) contributes over
// wss://: an https page cannot open ws://, so this is the path a volunteer
// on a TLS coordinator takes.
func TestContributeOverHTTPS(t *testing.T) {
	testenv.Long(t, "trains in Chromium over TLS")
	s := newSite(t, longSpec(t, "mnist-mlp"))
	ca := testcert.NewCA(t, "crowdtrain test CA")
	pair := ca.Valid(t, "127.0.0.1")
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.srv.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	hs.StartTLS()
	defer hs.Close()
	if !strings.HasPrefix(hs.URL, "https://") {
		t.Fatalf("test server at %s", hs.URL)
	}
	browser := testbrowser.New(t, chromedp.Flag("ignore-certificate-errors-spki-list", testcert.SPKIHash(pair.Cert)))
	do(t, browser, 30*time.Second, chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible("#contribute"), chromedp.Click("#contribute"))
	s.waitFor("a browser worker over wss:// with accepted results", 2*time.Minute, func() bool {
		n, acc, _ := s.browserWorkers()
		return n == 1 && acc >= 3
	})
	if proto := get(t, browser, chromedp.Evaluate[string](`location.protocol`)); proto != "https:" {
		t.Fatalf("the page is at %q, want https:", proto)
	}
	n, acc, ex := s.browserWorkers()
	t.Logf("over https/wss: %d browser worker, %d results accepted, %d examples", n, acc, ex)
}
