// Package testenv is what tests in several packages share about the
// machine they run on.
package testenv

import (
	"os"
	"testing"
)

// RequireVar is set to 1 by CI (.ci/run), which installs everything the
// tests use: Chromium, Node.js, Python with numpy, websockets and msgpack,
// and the Debian data packages.
const RequireVar = "CROWDTRAIN_REQUIRE_BROWSER"

// Missing skips t because something it needs is not on this machine (msg
// says what, and how to install it), or fails t where RequireVar says it
// must be there.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireVar) == "1" {
		t.Fatal(msg + "; " + RequireVar + "=1 says this machine has it (CI installs it)")
	}
	t.Skip(msg)
}
