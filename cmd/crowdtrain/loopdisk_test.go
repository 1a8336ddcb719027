package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/store"
)

// loopDisk is an ext4 file system in an image file, loop-mounted: what
// its image file holds is what reached the "disk"; what the kernel still
// caches for the file system (unsynced writes) is not in it. Copying the
// image the moment the coordinator is killed is therefore the disk as a
// power cut at that moment would leave it.
type loopDisk struct {
	t     *testing.T
	image string
	mnt   string
}

func newLoopDisk(t *testing.T, mib int) *loopDisk {
	t.Helper()
	testenv.Long(t, "mounts file systems and runs coordinator processes")
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: cannot build a loop-mounted ext4 to cut the power under (%v)", tool, err)
		}
	}
	dir := t.TempDir()
	d := &loopDisk{t: t, image: filepath.Join(dir, "disk.img"), mnt: filepath.Join(dir, "mnt")}
	os.Mkdir(d.mnt, 0o755)
	if err := os.Truncate(d.image, int64(mib)<<20); err != nil {
		f, _ := os.Create(d.image)
		f.Close()
		if err := os.Truncate(d.image, int64(mib)<<20); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", d.image).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", d.image, d.mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot loop-mount an ext4 image (needs root and loop devices, which CI has): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", d.mnt).Run() })
	return d
}

// powerCut copies the image as the disk holds it now, repairs it as a
// boot would (e2fsck replays the journal) and mounts the copy; it returns
// the copy's mount point.
func (d *loopDisk) powerCut() string {
	d.t.Helper()
	copyPath := d.image + ".cut"
	if out, err := exec.Command("cp", "--sparse=always", d.image, copyPath).CombinedOutput(); err != nil {
		d.t.Fatalf("copying the image: %v: %s", err, out)
	}
	// Exit status 1 and 2 mean errors corrected: a power cut may leave some.
	if out, err := exec.Command("e2fsck", "-fy", copyPath).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 2 {
			d.t.Fatalf("e2fsck of the cut image: %v: %s", err, out)
		}
	}
	mnt := d.mnt + ".cut"
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-o", "loop", copyPath, mnt).CombinedOutput(); err != nil {
		d.t.Fatalf("mounting the cut image: %v: %s", err, out)
	}
	d.t.Cleanup(func() { exec.Command("umount", mnt).Run(); os.Remove(copyPath) })
	return mnt
}

// A job reported created and a checkpoint reported written survive a
// power cut at the moment of the report: both were fsynced before the
// report. (With synchronous=NORMAL they were only in the page cache: the
// cut image had no job at all, or an older checkpoint.)
func TestPowerCutAtTheReportLosesNothingReported(t *testing.T) {
	disk := newLoopDisk(t, 96)
	dbPath := filepath.Join(disk.mnt, "ct.db")
	addr := freeAddr(t)
	args := []string{"serve", "--addr", addr, "--db", dbPath, "--job", "mnist-mlp", "--checkpoint-interval", "100ms", "-v"}
	ctx := context.Background()

	// 1. Killed, power cut, the moment the job is reported created.
	srv := startProc(t, args...)
	created := regexp.MustCompile(`\d+ parameters.* job=(\S+) name=mnist-mlp`).FindStringSubmatch(srv.waitLine("parameters,", time.Minute))
	srv.kill()
	if created == nil {
		t.Fatalf("no job-created line in the log:\n%s", srv.logText())
	}
	cut := disk.powerCut()
	db, err := store.Open(filepath.Join(cut, "ct.db"))
	if err != nil {
		t.Fatalf("database after a power cut at the job's creation: %v", err)
	}
	t.Cleanup(func() { db.Close() }) // before the copy is unmounted
	if _, err := db.Job(ctx, created[1]); err != nil {
		t.Fatalf("job %s was reported created, but after a power cut: %v", created[1], err)
	}
	db.Close()
	exec.Command("umount", cut).Run()

	// 2. Killed, power cut, the moment a checkpoint past version 0 is
	// reported written (the API reports the same: last_checkpoint).
	srv = startProc(t, append(args, "--local-workers", "1")...)
	written := regexp.MustCompile(`checkpoint v(\d+) written`)
	var reported int64
	for reported == 0 {
		m := written.FindStringSubmatch(srv.waitLine("written", time.Minute))
		if m != nil {
			reported, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	srv.kill()
	cut = disk.powerCut()
	db, err = store.Open(filepath.Join(cut, "ct.db"))
	if err != nil {
		t.Fatalf("database after a power cut at a checkpoint report: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := db.LatestCheckpoint(ctx, created[1])
	if err != nil || c.Version < reported {
		t.Fatalf("checkpoint v%d was reported written, but after a power cut the latest is v%d (%v)", reported, c.Version, err)
	}
	t.Logf("checkpoint v%d reported; after the power cut the latest is v%d", reported, c.Version)
}

// freeze freezes the file system (fsfreeze): every write to it blocks
// until thaw, as a hung disk or a snapshotting tool would make them. The
// returned func thaws it; it also runs at cleanup, before the processes
// are killed (a process blocked on a frozen file system dies only once it
// is thawed).
func (d *loopDisk) freeze() (thaw func()) {
	d.t.Helper()
	if out, err := exec.Command("fsfreeze", "-f", d.mnt).CombinedOutput(); err != nil {
		d.t.Skipf("fsfreeze: %v: %s", err, out)
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			exec.Command("fsfreeze", "-u", d.mnt).Run()
		}
	}
	d.t.Cleanup(thaw)
	return thaw
}

// With the database's file system frozen, a worker joining still gets its
// welcome at once, and SIGTERM ends serve within --store-shutdown-timeout,
// saying that the final checkpoint was not written. (Before, joining waited
// on the worker's record: no welcome within 15 s, and SIGTERM hung.)
func TestFrozenFileSystemDelaysNeitherJoinNorSIGTERM(t *testing.T) {
	if _, err := exec.LookPath("fsfreeze"); err != nil {
		t.Skipf("no fsfreeze: %v", err)
	}
	disk := newLoopDisk(t, 96)
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", filepath.Join(disk.mnt, "ct.db"), "--job", "mnist-mlp",
		"--local-workers", "1", "--checkpoint-interval", "100ms", "--store-shutdown-timeout", "2s")
	waitJob(t, addr, time.Minute, "a checkpoint past version 0", func(v coordinator.JobView) bool {
		return v.LastCheckpoint != nil && v.LastCheckpoint.Version > 0
	})
	thaw := disk.freeze()
	time.Sleep(300 * time.Millisecond) // a checkpoint and metrics are now stuck in write

	for i := range 3 {
		start := time.Now()
		snapshotOfFirstLease(t, addr) // hello, welcome, a lease and its snapshot, bye
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("worker %d waited %v for its welcome and lease with the file system frozen; want them at once", i, took.Round(time.Millisecond))
		}
	}

	start := time.Now()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	line := srv.waitLine("crowdtrain serve:", 10*time.Second)
	if took := time.Since(start); took > 6*time.Second {
		t.Fatalf("serve took %v to give up on a frozen store after SIGTERM; want about --store-shutdown-timeout (2s)", took.Round(time.Millisecond))
	}
	if !strings.Contains(line, "did not finish writing the final checkpoints within 2s") {
		t.Fatalf("serve's last words with the store frozen: %q; want them to say the final checkpoints were not written\n%s", line, srv.logText())
	}
	t.Logf("gave up %v after SIGTERM: %s", time.Since(start).Round(time.Millisecond), line)
	thaw() // a process blocked on a frozen file system exits only once it is thawed
	var ee *exec.ExitError
	if err := <-srv.done; !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve exited with %v; want status 1", err)
	}
	srv.cmd.ProcessState = &os.ProcessState{}
}
