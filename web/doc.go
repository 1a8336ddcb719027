// Package web serves the pages a browser meets: the contribute page at /,
// the admin page at /admin, their scripts, and the browser worker (Go
// compiled to WebAssembly, with the wasm_exec.js of the toolchain that
// built it).
//
// The pages and scripts are embedded from static/ (subfolders included,
// served under the same path below /static/). The worker is embedded
// from dist/, which `make build` fills (see the Makefile's wasm target); a
// binary built without it still serves the page, which then says so, and
// NewHandler logs it. Every asset is served with a strong ETag and
// "Cache-Control: no-cache" (revalidated, so an upgrade is seen at once),
// gzip-compressed when the browser accepts it.
//
// The contribute page keeps the volunteer's identity in localStorage
// (identity.js): a volunteer key of 32 random bytes made once, the display
// name, and the join token when the coordinator asks for one (/api/v1/join;
// a ?token= link fills it in). Each browser worker sends them in its hello;
// a new name or token reconnects at once. The leaderboard (leaderboard.js)
// reads the public credit list every 10 s. Names are the volunteers' own
// words: both pages put them in as text, never as markup.
//
// The admin page is static HTML; admin.js signs in with the admin token
// and reads and steers jobs and workers through the coordinator's JSON API
// (/admin/login, /api/v1/...) and its event stream (/api/v1/events), which
// the coordinator serves, not this package; admin-volunteers.js adds the
// volunteers' standing with Ban and Pardon, the join tokens, and each
// job's results by ack reason. Its wide tables scroll inside their panels
// with the last column (the row's buttons) kept in view, so a laptop
// window reaches Ban and Disconnect. Its charts use uPlot, vendored
// unchanged with its license in static/vendor/uplot-<version>/ (see the
// README there). Every response carries a Content-Security-Policy that
// allows only the pages' own scripts and styles, so the pages have no
// inline code or style attributes, lets them connect only to this
// coordinator and the relays it vouches for (AllowConnect), and post
// forms only to it.
//
// With Options.Downloads (serve --downloads DIR, the folder make dist
// writes) it also serves the worker's release archives and SHA256SUMS under
// /downloads/ (http.ServeContent: validators, ranges; a name that is a
// path, a dot file, a symbolic link or a folder is refused), and the
// installers /install.sh and /install.ps1 (install/), rendered with the
// URL the coordinator was reached by (docs/DIST.md). The contribute page's
// downloads.js offers the archive for the visitor's OS and architecture.
//
// web imports nothing of ours: the coordinator mounts its Handler.
package web
