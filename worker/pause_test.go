package worker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func at(hh, mm int) time.Time { return time.Date(2025, 3, 30, hh, mm, 0, 0, time.Local) }

func TestHoursWindow(t *testing.T) {
	for _, c := range []struct {
		window string
		in     []time.Time
		out    []time.Time
		str    string
	}{
		// Wrapping midnight: from ten at night to seven in the morning.
		{"22-07", []time.Time{at(22, 0), at(23, 59), at(0, 0), at(3, 0), at(6, 59)}, []time.Time{at(7, 0), at(12, 0), at(21, 59)}, "22-07"},
		{"9:30-17", []time.Time{at(9, 30), at(16, 59)}, []time.Time{at(9, 29), at(17, 0), at(0, 0)}, "09:30-17"},
		{"0-8", []time.Time{at(0, 0), at(7, 59)}, []time.Time{at(8, 0), at(23, 59)}, "00-08"},
		{"18-24", []time.Time{at(18, 0), at(23, 59)}, []time.Time{at(0, 0), at(17, 59)}, "18-00"},
		{" 23:15 - 00:45 ", []time.Time{at(23, 15), at(0, 44)}, []time.Time{at(0, 45), at(23, 14)}, "23:15-00:45"},
	} {
		h, err := ParseHours(c.window)
		if err != nil {
			t.Fatalf("ParseHours(%q): %v", c.window, err)
		}
		for _, tm := range c.in {
			if !h.Contains(tm) {
				t.Errorf("%q does not contain %s", c.window, tm.Format("15:04"))
			}
		}
		for _, tm := range c.out {
			if h.Contains(tm) {
				t.Errorf("%q contains %s", c.window, tm.Format("15:04"))
			}
		}
		if h.String() != c.str {
			t.Errorf("%q prints as %q, want %q", c.window, h, c.str)
		}
	}
	// Seconds count: 06:59:59.9 is inside 22-07, 07:00:00 is not.
	h, _ := ParseHours("22-07")
	if !h.Contains(at(6, 59).Add(59*time.Second+900*time.Millisecond)) || h.Contains(at(7, 0)) {
		t.Error("the window's end is not exact to the second")
	}
	if (Hours{}).Set() || !(Hours{}).Contains(at(12, 0)) {
		t.Error("the zero Hours is not the whole day")
	}
	for _, bad := range []struct{ in, says string }{
		{"22", "FROM-TO"}, {"", "FROM-TO"}, {"25-07", "0..24"}, {"ten-seven", "0..24"}, {"22-7:5", "00..59"},
		{"22:60-07", "00..59"}, {"7-7", "starts where it ends"}, {"0-24", "starts where it ends"}, {"24:30-07", "past the end"},
		{"-1-7", "0..24"}, {"100-7", "0..24"},
	} {
		if _, err := ParseHours(bad.in); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("ParseHours(%q) = %v, want an error saying %q", bad.in, err, bad.says)
		}
	}
}

// The governor pauses a worker outside its hours and resumes it inside,
// on the clock it is given; an idle detector's no pauses it too, and its
// yes resumes it only after ResumeAfter.
func TestGovernorFollowsHoursAndIdle(t *testing.T) {
	var clock atomic.Int64
	clock.Store(at(21, 0).UnixNano())
	h, _ := ParseHours("22-07")
	det := &switchIdle{}
	w, err := New(Config{Coordinator: "ws://127.0.0.1:1/ws", Backend: &refBackend{}, Hours: h, Idle: det,
		PollEvery: 5 * time.Millisecond, ResumeAfter: 30 * time.Second, Logf: t.Logf,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.govern(ctx)
	waitPaused := func(paused bool, says string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			s := w.Stats()
			if s.Paused == paused && strings.Contains(s.PauseReason, says) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v; want paused %v saying %q", s, paused, says)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPaused(true, "outside the hours 22-07 (local time 21:00)")
	clock.Store(at(22, 0).UnixNano())
	time.Sleep(50 * time.Millisecond)
	if !w.Stats().Paused {
		t.Fatal("resumed before the window had been open for ResumeAfter")
	}
	clock.Store(at(22, 0).Add(30 * time.Second).UnixNano())
	waitPaused(false, "")
	det.busy.Store(true)
	waitPaused(true, "the machine is busy: typing")
	det.busy.Store(false)
	clock.Store(at(22, 1).UnixNano()) // idle seen from here
	time.Sleep(50 * time.Millisecond)
	if !w.Stats().Paused {
		t.Fatal("resumed at once after the machine turned idle")
	}
	clock.Store(at(22, 2).UnixNano())
	waitPaused(false, "")
	clock.Store(at(7, 0).Add(24 * time.Hour).UnixNano())
	waitPaused(true, "outside the hours")
}

type switchIdle struct{ busy atomic.Bool }

func (s *switchIdle) Idle() (bool, string) {
	if s.busy.Load() {
		return false, "typing"
	}
	return true, "nobody here"
}
