// Package polite is the native worker's manners on a volunteer's machine
// (crowdtrain work): whether the machine is otherwise idle, measured the
// way its operating system allows (System, a worker.IdleDetector), and
// running at low priority (LowerPriority).
//
// What each detector measures:
//   - Linux: other programs' share of the CPU time from /proc/stat, less
//     this process's own from /proc/self/stat, between two polls; and the
//     last input on a terminal, the newest access time of /dev/pts/* and
//     /dev/tty[0-9]* (what `w` shows as IDLE). A graphical session's
//     mouse and keyboard do not show there: only a display server knows
//     them, so on a desktop the CPU load is what notices the user.
//   - macOS: HIDIdleTime of IOHIDSystem (`ioreg -c IOHIDSystem`), the time
//     since the last keyboard, mouse or trackpad input; and the one-minute
//     load average (sysctl vm.loadavg) less this process's own share,
//     averaged over the same minute.
//   - Windows: GetLastInputInfo (the session's last input) and
//     GetSystemTimes less this process's GetProcessTimes, between polls.
//
// Low priority is nice 10 on Unix (every thread, since Linux niceness is
// per thread) and BELOW_NORMAL_PRIORITY_CLASS on Windows.
//
// polite imports worker and nothing else of ours; it is not built for the
// browser.
package polite
