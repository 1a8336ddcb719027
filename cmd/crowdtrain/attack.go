package main

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/crowdtrain/crowdtrain/internal/attack"
	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/tokenizer"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// attackCmd runs hostile volunteers against a coordinator (docs/ATTACKS.md).
func attackCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("attack", "attack --coordinator ws://HOST:PORT/ws --kind KIND [flags]   (docs/ATTACKS.md)")
	coord := fs.String("coordinator", "", "coordinator websocket `URL` (ws://HOST:PORT/ws)")
	kind := fs.String("kind", "", "the attack: signflip, scale, ratchet, early, alie, ipm, labelflip, nan, noise, mimic, replay, hostage, sybil, zero or forge-rollout (RL jobs)")
	n := fs.Int("n", 0, "hostile volunteers, one connection each (0: 1, or 20 for sybil; with a --bind range, one per address)")
	scale := fs.Float64("scale", 0, "the kind's scale S (0: its default; see docs/ATTACKS.md)")
	fraction := fs.Float64("fraction", 1, "the share `F` of results that lie (0 < F <= 1); the rest are computed honestly")
	bind := fs.String("bind", "", "local IP `ADDRS` to connect from: one (127.0.0.5), a list (A,B,...) or a range (127.0.0.2-127.0.0.9); attacker i takes the i-th")
	keys := fs.Int("keys", 0, "give the attackers `K` volunteer keys of their own (attacker i presents key i mod K): separate volunteers even on one address")
	duration := fs.Duration("duration", 0, "stop after this long and print the report (0: at Ctrl-C)")
	joinToken := fs.String("join-token", "", "join `TOKEN` every attacker presents, for a coordinator run with --join token")
	job := fs.String("job", "", "the job `ID` the attack expects the coordinator to assign")
	tokFile := fs.String("tokenizer", "", "forge-rollout: the RL policy's tokenizer `FILE` (as `crowdtrain tokenizer train` writes it), to read prompts and write answers in its tokens; without it, a byte-level policy's")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if *coord == "" {
		return usagef("--coordinator is required (ws://HOST:PORT/ws)")
	}
	if *kind == "" {
		return usagef("--kind is required: %v", kindList())
	}
	k, err := attack.ParseKind(*kind)
	if err != nil {
		return usagef("--kind: %v", err)
	}
	if !(*fraction > 0 && *fraction <= 1) {
		return usagef("--fraction must be in (0, 1] (the share of results that lie), got %v", *fraction)
	}
	if *duration < 0 {
		return usagef("--duration must be >= 0, got %v", *duration)
	}
	var binds []string
	if *bind != "" {
		if binds, err = attack.ParseBinds(*bind); err != nil {
			return usagef("--bind: %v", err)
		}
	}
	if *n == 0 && len(binds) > 1 {
		*n = len(binds) // one attacker per address
	}
	var codec *rljob.Codec
	if *tokFile != "" {
		if k != attack.ForgeRollout {
			return usagef("--tokenizer is forge-rollout's (an RL policy's tokens), not %s's", k)
		}
		tok, err := tokenizer.Load(*tokFile)
		if err != nil {
			return usagef("--tokenizer: %v", err)
		}
		codec = rljob.Tokenized(tok)
	}
	logger := log.New(stderr, "", log.LstdFlags)
	cfg := attack.Config{Codec: codec,
		Coordinator: *coord, Kind: k, N: *n, Scale: *scale, Fraction: *fraction, Binds: binds, Keys: *keys, JobID: *job, JoinToken: *joinToken,
		Client: "crowdtrain-attack/" + version, Logf: logger.Printf,
		NewBackend: func() (worker.Backend, error) { return cpu.New(1) },
	}
	if err := cfg.Check(); err != nil {
		return usagef("%v", err)
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	logger.Printf("attack %s: %d hostile volunteers against %s", k, cfg.N, *coord)
	r, err := attack.Run(ctx, cfg)
	if r != nil {
		r.Print(stdout)
	}
	return err
}

func kindList() string {
	s := ""
	for i, k := range attack.Kinds {
		if i > 0 {
			s += ", "
		}
		s += string(k)
	}
	return fmt.Sprintf("one of %s", s)
}
