#!/bin/sh
# Installs the crowdtrain worker from the coordinator at {{.URL}}
# into your own directory (no root needed):
#
#   curl -fsSL {{.URL}}/install.sh | sh
#   curl -fsSL {{.URL}}/install.sh | sh -s -- --service
#
# Options:
#   --coordinator URL   the coordinator to download from and to work for
#                       (default: {{.URL}})
#   --prefix DIR        install into DIR/bin (default: ~/.local)
#   --join-token TOKEN  the join token a coordinator in token mode asks for
#   --service           also start the worker now and at every login: a
#                       systemd --user unit on Linux, a launchd agent on macOS
#   --uninstall         remove what an earlier run installed under --prefix
#
# It downloads the archive for this machine and SHA256SUMS from the
# coordinator, checks the archive's SHA-256, and installs nothing if it
# does not match.
set -eu

COORDINATOR='{{.URL}}'
PREFIX=${HOME:?HOME is not set}/.local
SERVICE=0
UNINSTALL=0
JOIN_TOKEN=
UNIT=crowdtrain-worker.service
AGENT=org.crowdtrain.worker

say() { printf '%s\n' "$*"; }
die() {
	printf 'install.sh: %s\n' "$*" >&2
	exit 1
}
usage() { sed -n '2,20s/^# \{0,1\}//p' "$0" 2>/dev/null || say "see the comments at the top of {{.URL}}/install.sh"; }

while [ $# -gt 0 ]; do
	case $1 in
	--coordinator) [ $# -ge 2 ] || die "--coordinator needs a URL"; COORDINATOR=$2; shift ;;
	--coordinator=*) COORDINATOR=${1#*=} ;;
	--prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; PREFIX=$2; shift ;;
	--prefix=*) PREFIX=${1#*=} ;;
	--join-token) [ $# -ge 2 ] || die "--join-token needs a token"; JOIN_TOKEN=$2; shift ;;
	--join-token=*) JOIN_TOKEN=${1#*=} ;;
	--service) SERVICE=1 ;;
	--uninstall) UNINSTALL=1 ;;
	-h | --help) usage; exit 0 ;;
	*) printf 'install.sh: unknown option %s (see --help)\n' "$1" >&2; exit 2 ;;
	esac
	shift
done

COORDINATOR=${COORDINATOR%/}
case $COORDINATOR in
http://?* | https://?*) ;;
*) die "--coordinator $COORDINATOR: want the coordinator's http:// or https:// URL" ;;
esac
case $COORDINATOR in
*[!]A-Za-z0-9.:/_~%[-]*) die "--coordinator $COORDINATOR: unexpected characters in the URL" ;;
esac
case $JOIN_TOKEN in
*[!A-Za-z0-9._~+=-]*) die "--join-token: unexpected characters in the token" ;;
esac
case $PREFIX in
/*) ;;
*) PREFIX=$(pwd)/$PREFIX ;;
esac
BIN=$PREFIX/bin/crowdtrain
STATE=$PREFIX/share/crowdtrain
MANIFEST=$STATE/installed

os=$(uname -s)
case $os in
Linux) os=linux ;;
Darwin) os=darwin ;;
MINGW* | MSYS* | CYGWIN* | Windows_NT) die "on Windows, run install.ps1 in PowerShell: irm $COORDINATOR/install.ps1 | iex" ;;
*) die "no worker is built for $os: build it from source (README, \"Contribute with a native worker\")" ;;
esac
arch=$(uname -m)
case $arch in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64 | armv8*) arch=arm64 ;;
*) die "no worker is built for $os/$arch: build it from source (README, \"Contribute with a native worker\")" ;;
esac

service_file() {
	case $os in
	linux) say "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user/$UNIT" ;;
	darwin) say "$HOME/Library/LaunchAgents/$AGENT.plist" ;;
	esac
}

# stop_service stops and deregisters the service; quiet when there is none.
stop_service() {
	f=$(service_file)
	[ -f "$f" ] || return 0
	case $os in
	linux) command -v systemctl >/dev/null 2>&1 && systemctl --user disable --now "$UNIT" >/dev/null 2>&1 || true ;;
	darwin) launchctl unload -w "$f" >/dev/null 2>&1 || true ;;
	esac
}

if [ "$UNINSTALL" = 1 ]; then
	[ -f "$MANIFEST" ] || die "nothing installed under $PREFIX ($MANIFEST is missing)"
	stop_service
	# Files first, then the directories this installer made, deepest first.
	while IFS= read -r line; do
		case $line in
		"file "*) rm -f "${line#file }" ;;
		esac
	done <"$MANIFEST"
	if [ "$os" = linux ] && command -v systemctl >/dev/null 2>&1; then
		systemctl --user daemon-reload >/dev/null 2>&1 || true
	fi
	dirs=$(sed -n 's/^dir //p' "$MANIFEST" | awk '{ l[NR] = $0 } END { for (i = NR; i > 0; i--) print l[i] }')
	rm -f "$MANIFEST"
	rmdir "$STATE" 2>/dev/null || true
	printf '%s\n' "$dirs" | while IFS= read -r d; do
		[ -n "$d" ] && rmdir "$d" 2>/dev/null || true
	done
	say "removed the crowdtrain worker from $PREFIX"
	keydir=${XDG_CONFIG_HOME:-$HOME/.config}/crowdtrain
	[ -d "$keydir" ] && say "kept $keydir (your volunteer key, to which your credit is attached): delete it to forget it"
	exit 0
fi

if command -v curl >/dev/null 2>&1; then
	fetch() { curl -fsSL --proto '=http,https' -o "$2" "$1"; }
elif command -v wget >/dev/null 2>&1; then
	fetch() { wget -q -O "$2" "$1"; }
else
	die "neither curl nor wget is installed: install one of them"
fi
if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$1" | awk '{ print $1 }'; }
elif command -v shasum >/dev/null 2>&1; then
	sha256() { shasum -a 256 "$1" | awk '{ print $1 }'; }
else
	die "neither sha256sum nor shasum is installed: the download cannot be checked, so nothing was installed"
fi

tmp=$(mktemp -d 2>/dev/null || mktemp -d -t crowdtrain)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

fetch "$COORDINATOR/downloads/SHA256SUMS" "$tmp/SHA256SUMS" ||
	die "cannot download $COORDINATOR/downloads/SHA256SUMS: is the coordinator started with --downloads?"
suffix=_${os}_${arch}.tar.gz
name=$(awk -v s="$suffix" '{ n = $2; sub(/^\*/, "", n); if (length(n) > length(s) && substr(n, length(n) - length(s) + 1) == s) { print n; exit } }' "$tmp/SHA256SUMS")
[ -n "$name" ] || die "$COORDINATOR offers no worker for $os/$arch (its SHA256SUMS lists none)"
case $name in
*[!A-Za-z0-9._+-]* | .*) die "unexpected archive name in SHA256SUMS: $name" ;;
esac
want=$(awk -v n="$name" '{ f = $2; sub(/^\*/, "", f); if (f == n) { print tolower($1); exit } }' "$tmp/SHA256SUMS")
say "downloading $name from $COORDINATOR"
fetch "$COORDINATOR/downloads/$name" "$tmp/$name" ||
	die "cannot download $COORDINATOR/downloads/$name (a 429 means this address downloaded much lately: try again in a minute); nothing was installed"
got=$(sha256 "$tmp/$name")
if [ "$got" != "$want" ]; then
	die "checksum mismatch for $name: SHA256SUMS says $want, the download is $got; nothing was installed"
fi
mkdir "$tmp/x"
(cd "$tmp/x" && tar -xzf "../$name" crowdtrain) || die "$name holds no crowdtrain binary; nothing was installed"
"$tmp/x/crowdtrain" version >/dev/null 2>&1 || die "the downloaded worker does not run on this machine; nothing was installed"

# mkdirs makes a directory and its missing parents, noting each one made
# in the manifest so that --uninstall removes them again.
made=
mkdirs() {
	missing=
	d=$1
	while [ ! -d "$d" ]; do
		missing="$d
$missing"
		d=$(dirname "$d")
	done
	mkdir -p "$1"
	made="$made$missing"
}
mkdirs "$PREFIX/bin"
mkdirs "$STATE"
cp "$tmp/x/crowdtrain" "$BIN.new"
chmod 755 "$BIN.new"
mv -f "$BIN.new" "$BIN"

files="file $BIN"
work_args="work --coordinator $COORDINATOR"
[ -n "$JOIN_TOKEN" ] && work_args="$work_args --join-token $JOIN_TOKEN"

if [ "$SERVICE" = 1 ]; then
	f=$(service_file)
	mkdirs "$(dirname "$f")"
	stop_service
	case $os in
	linux)
		(
			umask 077 # a join token is in it
			cat >"$f" <<EOF
# The crowdtrain worker, installed by $COORDINATOR/install.sh
[Unit]
Description=crowdtrain volunteer training worker for $COORDINATOR
Wants=network-online.target
After=network-online.target

[Service]
ExecStart="$BIN" $work_args
# SIGTERM hands the worker's leases back and exits 0.
KillSignal=SIGTERM
Restart=always
RestartSec=10
Nice=19
CPUSchedulingPolicy=idle
IOSchedulingClass=idle

[Install]
WantedBy=default.target
EOF
		)
		files="$files
file $f"
		if command -v systemctl >/dev/null 2>&1 && systemctl --user daemon-reload && systemctl --user enable --now "$UNIT"; then
			say "started the worker as a systemd user service: systemctl --user status $UNIT"
			say "to keep it running while you are logged out: loginctl enable-linger $(id -un)"
		else
			say "wrote $f, but could not start it (no systemd user session?): systemctl --user enable --now $UNIT"
		fi
		;;
	darwin)
		args=
		for a in "$BIN" $work_args; do
			args="$args    <string>$a</string>
"
		done
		(
			umask 077
			cat >"$f" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- The crowdtrain worker, installed by $COORDINATOR/install.sh -->
<plist version="1.0">
<dict>
  <key>Label</key><string>$AGENT</string>
  <key>ProgramArguments</key>
  <array>
$args  </array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>ProcessType</key><string>Background</string>
  <key>LowPriorityIO</key><true/>
  <key>Nice</key><integer>19</integer>
  <key>StandardErrorPath</key><string>$STATE/worker.log</string>
</dict>
</plist>
EOF
		)
		files="$files
file $f
file $STATE/worker.log"
		if launchctl load -w "$f"; then
			say "started the worker as a launchd agent ($AGENT); its log: $STATE/worker.log"
		else
			say "wrote $f, but could not load it: launchctl load -w $f"
		fi
		;;
	esac
fi

{
	# What an earlier run installed stays listed: a service file, the
	# directories it made (which exist now, so are not "made" this time).
	if [ -f "$MANIFEST" ]; then grep '^file ' "$MANIFEST" || true; fi
	printf '%s\n' "$files"
	if [ -f "$MANIFEST" ]; then grep '^dir ' "$MANIFEST" || true; fi
	printf '%s' "$made" | sed -n 's/^\(.\)/dir \1/p'
} >"$MANIFEST.new"
awk '!seen[$0]++' "$MANIFEST.new" >"$MANIFEST"
rm -f "$MANIFEST.new"

say "installed $("$BIN" version | head -n 1) to $BIN"
case :${PATH:-}: in
*:"$PREFIX/bin":*) cmd=crowdtrain ;;
*)
	cmd=$BIN
	say "($PREFIX/bin is not on your PATH: add it, or run the worker by its full path)"
	;;
esac
if [ "$SERVICE" != 1 ]; then
	say "start it:"
	say "  $cmd $work_args"
	say "or install again with --service to run it in the background at every login"
fi
say "remove it: curl -fsSL $COORDINATOR/install.sh | sh -s -- --prefix $PREFIX --uninstall"
