//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

// backup copies a live database (store.Backup): serve may keep running.
func backup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("backup", "backup --db FILE --out FILE [--force]   (a live database, while serve runs)")
	db := fs.String("db", "", "the database `FILE` of `crowdtrain serve --db` (it may be running)")
	out := fs.String("out", "", "write the copy to `FILE`")
	force := fs.Bool("force", false, "replace --out if it exists")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if *db == "" || *out == "" {
		return usagef("--db FILE and --out FILE are required: crowdtrain backup --db crowdtrain.db --out backup.db")
	}
	start := time.Now()
	res, err := store.Backup(ctx, *db, *out, *force)
	if errors.Is(err, store.ErrBackupExists) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s: %d pages, %d bytes, integrity_check ok, in %s\n",
		*db, *out, res.Pages, res.Bytes, time.Since(start).Round(time.Millisecond))
	return nil
}
