# Installs the crowdtrain worker from the coordinator at {{.URL}}
# into your own folder (no administrator needed). In PowerShell:
#
#   irm {{.URL}}/install.ps1 | iex
#   & ([scriptblock]::Create((irm {{.URL}}/install.ps1))) -Service
#
# Parameters:
#   -Coordinator URL   the coordinator to download from and to work for
#                      (default: {{.URL}})
#   -Prefix DIR        install into DIR\bin (default: %LOCALAPPDATA%\crowdtrain)
#   -JoinToken TOKEN   the join token a coordinator in token mode asks for
#   -Service           also start the worker at every logon (a scheduled task)
#   -Uninstall         remove what an earlier run installed under -Prefix
#
# It downloads the archive for this machine and SHA256SUMS from the
# coordinator, checks the archive's SHA-256, and installs nothing if it
# does not match.
param(
    [string]$Coordinator = '{{.URL}}',
    [string]$Prefix = (Join-Path $env:LOCALAPPDATA 'crowdtrain'),
    [string]$JoinToken = '',
    [switch]$Service,
    [switch]$Uninstall
)
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue' # Invoke-WebRequest is slow with it
$TaskName = 'crowdtrain worker'

function Fail([string]$msg) {
    Write-Host "install.ps1: $msg" -ForegroundColor Red
    exit 1
}

$Coordinator = $Coordinator.TrimEnd('/')
if ($Coordinator -notmatch '^https?://[A-Za-z0-9.:\[\]_~%/-]+$') {
    Fail "-Coordinator ${Coordinator}: want the coordinator's http:// or https:// URL"
}
if ($JoinToken -notmatch '^[A-Za-z0-9._~+=-]*$') { Fail '-JoinToken: unexpected characters in the token' }
$Bin = Join-Path $Prefix 'bin'
$Exe = Join-Path $Bin 'crowdtrain.exe'
$Manifest = Join-Path $Prefix 'installed.txt'

if ($Uninstall) {
    if (-not (Test-Path $Manifest)) { Fail "nothing installed under $Prefix ($Manifest is missing)" }
    if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) {
        Stop-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
        Unregister-ScheduledTask -TaskName $TaskName -Confirm:$false
    }
    Get-Process -Name crowdtrain -ErrorAction SilentlyContinue | Where-Object { $_.Path -eq $Exe } | Stop-Process -Force
    foreach ($line in Get-Content $Manifest) {
        if ($line.StartsWith('file ')) { Remove-Item -Force -ErrorAction SilentlyContinue $line.Substring(5) }
    }
    Remove-Item -Force $Manifest
    foreach ($d in @($Bin, $Prefix)) {
        if ((Test-Path $d) -and -not (Get-ChildItem -Force $d)) { Remove-Item -Force $d }
    }
    Write-Host "removed the crowdtrain worker from $Prefix"
    exit 0
}

switch ($env:PROCESSOR_ARCHITECTURE) {
    'AMD64' { $arch = 'amd64' }
    'ARM64' { $arch = 'arm64' }
    default { Fail "no worker is built for Windows on $($env:PROCESSOR_ARCHITECTURE)" }
}
# A 32-bit PowerShell on a 64-bit Windows says x86 here; ask the OS.
if ($env:PROCESSOR_ARCHITEW6432 -eq 'ARM64') { $arch = 'arm64' } elseif ($env:PROCESSOR_ARCHITEW6432 -eq 'AMD64') { $arch = 'amd64' }

$tmp = Join-Path ([System.IO.Path]::GetTempPath()) ('crowdtrain-' + [guid]::NewGuid())
New-Item -ItemType Directory -Path $tmp | Out-Null
try {
    $sums = Join-Path $tmp 'SHA256SUMS'
    try { Invoke-WebRequest -UseBasicParsing -Uri "$Coordinator/downloads/SHA256SUMS" -OutFile $sums }
    catch { Fail "cannot download $Coordinator/downloads/SHA256SUMS ($($_.Exception.Message)): is the coordinator started with --downloads?" }
    $suffix = "_windows_$arch.zip"
    $line = Get-Content $sums | Where-Object { ($_ -split '\s+', 2)[1].TrimStart('*').EndsWith($suffix) } | Select-Object -First 1
    if (-not $line) { Fail "$Coordinator offers no worker for windows/$arch (its SHA256SUMS lists none)" }
    $want, $name = $line -split '\s+', 2
    $name = $name.TrimStart('*')
    if ($name -notmatch '^[A-Za-z0-9][A-Za-z0-9._+-]*$') { Fail "unexpected archive name in SHA256SUMS: $name" }
    Write-Host "downloading $name from $Coordinator"
    $zip = Join-Path $tmp $name
    try { Invoke-WebRequest -UseBasicParsing -Uri "$Coordinator/downloads/$name" -OutFile $zip }
    catch { Fail "cannot download $Coordinator/downloads/$name ($($_.Exception.Message))" }
    $got = (Get-FileHash -Algorithm SHA256 -Path $zip).Hash.ToLowerInvariant()
    if ($got -ne $want.ToLowerInvariant()) {
        Fail "checksum mismatch for ${name}: SHA256SUMS says $want, the download is $got; nothing was installed"
    }
    $x = Join-Path $tmp 'x'
    Expand-Archive -Path $zip -DestinationPath $x
    $new = Join-Path $x 'crowdtrain.exe'
    if (-not (Test-Path $new)) { Fail "$name holds no crowdtrain.exe; nothing was installed" }

    New-Item -ItemType Directory -Force -Path $Bin | Out-Null
    if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) { Stop-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue }
    Copy-Item -Force $new $Exe
    Set-Content -Path $Manifest -Value @("file $Exe")
} finally {
    Remove-Item -Recurse -Force -ErrorAction SilentlyContinue $tmp
}

$workArgs = @('work', '--coordinator', $Coordinator)
if ($JoinToken) { $workArgs += @('--join-token', $JoinToken) }
$version = (& $Exe version | Select-Object -First 1)
Write-Host "installed $version to $Exe"
if ($Service) {
    $action = New-ScheduledTaskAction -Execute $Exe -Argument ($workArgs -join ' ')
    $trigger = New-ScheduledTaskTrigger -AtLogOn -User $env:USERNAME
    # Below normal priority, no time limit, restarted if it stops.
    $settings = New-ScheduledTaskSettingsSet -Priority 7 -ExecutionTimeLimit ([TimeSpan]::Zero) -RestartCount 999 `
        -RestartInterval (New-TimeSpan -Minutes 1) -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries
    Register-ScheduledTask -TaskName $TaskName -Action $action -Trigger $trigger -Settings $settings -Force | Out-Null
    Start-ScheduledTask -TaskName $TaskName
    Write-Host "started the worker as the scheduled task '$TaskName' (at every logon); see it in Task Scheduler"
} else {
    Write-Host 'start it:'
    Write-Host "  & '$Exe' $($workArgs -join ' ')"
    Write-Host 'or install again with -Service to run it in the background at every logon'
}
Write-Host "remove it: & ([scriptblock]::Create((irm $Coordinator/install.ps1))) -Prefix '$Prefix' -Uninstall"
