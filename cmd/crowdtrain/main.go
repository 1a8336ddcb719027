// Command crowdtrain is the one binary of the volunteer training grid:
// serve runs a coordinator, work joins a worker, status and bench inform.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// usageError marks bad command-line input: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

const usage = `crowdtrain — a volunteer compute grid for training neural networks

Usage:
  crowdtrain serve  --addr HOST:PORT --job NAME|FILE [--local-workers N (0)] [--data DIR] [--db FILE] [--admin-token T (16+ chars)] [--join open|token]
                    [--tls-cert FILE --tls-key FILE | --acme-domain NAME] [--public-url https://...]
                    [--nats-listen HOST:PORT [--nats-tls-cert F --nats-tls-key F] | --nats URL] [--relay-approval auto|manual]
  crowdtrain relay  --upstream nats://HOST:PORT --creds FILE --addr HOST:PORT [--public-url wss://...] [--nats-ca FILE] [--data DIR]
                    [--tls-cert FILE --tls-key FILE] [--ca-file FILE]
  crowdtrain relay-credential NAME [--out FILE] [--url wss://HOST/ws] [--coordinator URL] [--token T]
  crowdtrain relay-credential --revoke NAME [--coordinator URL] [--token T]
  crowdtrain work   --coordinator ws[s]://HOST:PORT/ws[,ws://...] [--backend auto|cpu|cuda] [--device N] [--threads N]
                    [--join-token T] [--name NAME] [--key-file FILE] [--ca-file FILE] [--job ID]
                    [--kernel auto|avx512|avx2|neon|openblas|gonum|go] [--memory-mb MB]
  crowdtrain status --coordinator http://HOST:PORT [--token T | --token-file FILE] [--json]
  crowdtrain jobs   list [--json] | show ID | pause ID | resume ID | stop ID | patch ID KEY=VALUE...
  crowdtrain tokens issue NAME | list [--json]
  crowdtrain volunteers list [--json] | ban ID [--reason TEXT] | pardon ID
                    (jobs, tokens, volunteers: [--coordinator URL] [--token T | --token-file FILE])
  crowdtrain backup --db FILE --out FILE [--force]    (a live database, while serve runs)
  crowdtrain submit --coordinator http://HOST:PORT [--token T] FILE|NAME
  crowdtrain bench  --model NAME [--batch 64] [--backend cpu|cuda|auto] [--threads 1]
  crowdtrain export --db FILE --job ID [--version V] [--format safetensors|onnx] --out FILE
  crowdtrain attack --coordinator ws://HOST:PORT/ws --kind KIND [--n N] [--scale S] [--bind ADDR] [--duration D] [--job ID] [--fraction F]
  crowdtrain sample --coordinator http://HOST:PORT --job ID --prompt TEXT [--tokens N] [--temperature T] [--seed S] [--token T]
  crowdtrain tokenizer train --data go-source|SPEC|DIR|FILE --vocab N --out FILE [--glob PATTERN]
  crowdtrain tokenizer encode|decode --tokenizer FILE   (text <-> token ids, one a line, stdin to stdout)
  crowdtrain version                   (or crowdtrain --version): version, commit, platform, cgo, GEMM kernels
  crowdtrain completion bash|zsh|fish  a shell completion script: source <(crowdtrain completion bash)

serve, work and relay take every flag also from the environment, as CROWDTRAIN_<FLAG>
(CROWDTRAIN_ADMIN_TOKEN), and from a YAML file, --config FILE (admin-token: ...): the command
line wins over the environment, the environment over the file; --print-config shows the result.
Run 'crowdtrain COMMAND -h' for a command's flags by concern; docs/CLI.md lists them all.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once, should a clean stop hang
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "relay":
		err = relay(ctx, args[1:], stdout, stderr)
	case "relay-credential":
		err = relayCredential(ctx, args[1:], stdout, stderr)
	case "work":
		err = work(ctx, args[1:], stdout, stderr)
	case "status":
		err = status(ctx, args[1:], stdout, stderr)
	case "submit":
		err = submit(ctx, args[1:], stdout, stderr)
	case "jobs":
		err = jobsCmd(ctx, args[1:], stdout, stderr)
	case "tokens":
		err = tokensCmd(ctx, args[1:], stdout, stderr)
	case "volunteers":
		err = volunteersCmd(ctx, args[1:], stdout, stderr)
	case "backup":
		err = backup(ctx, args[1:], stdout, stderr)
	case "bench":
		err = bench(ctx, args[1:], stdout, stderr)
	case "export":
		err = export(ctx, args[1:], stdout, stderr)
	case "sample":
		err = sample(ctx, args[1:], stdout, stderr)
	case "attack":
		err = attackCmd(ctx, args[1:], stdout, stderr)
	case "tokenizer":
		err = tokenizerCmd(ctx, args[1:], stdout, stderr)
	case "completion":
		err = completionCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		err = versionCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "crowdtrain: %s\n", unknownCommand(args[0]))
		return 2
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, errPrinted), errors.Is(err, errDescribed):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "crowdtrain %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return 0 // Ctrl-C: a clean stop
	default:
		fmt.Fprintf(stderr, "crowdtrain %s: %v\n", args[0], err)
		return 1
	}
}

// unknownCommand says that name is not a command, and which it may have
// meant.
func unknownCommand(name string) string {
	msg := fmt.Sprintf("unknown command %q", name)
	var near []string
	for _, c := range commandNames {
		if editDistance(name, c) <= max(2, (len(name)+1)/2) || len(name) >= 3 && strings.HasPrefix(c, name) {
			near = append(near, c)
		}
	}
	if len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return msg + " ('crowdtrain -h' lists the commands)"
}
