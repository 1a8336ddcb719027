package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// cliFlags is one command's flag set with what its help and its errors
// need: the flags grouped by concern, and hints for names that are not
// flags. Every command parses through it, so all share one help format
// and one answer to a mistyped flag.
type cliFlags struct {
	*flag.FlagSet
	cmd      string // as typed after crowdtrain: "serve", "jobs list"
	synopsis string // the usage line after "crowdtrain "
	headings []string
	heading  map[string]string // flag name -> its group's heading
	// hints answer a name that is not a flag but looks like one a user
	// would try, such as work's --token (the join token is --join-token).
	hints map[string]string
	// layered commands also read CROWDTRAIN_<FLAG> and --config (config.go).
	layered     bool
	fresh       func() *cliFlags
	configPath  string
	printConfig bool
}

func newCLIFlags(cmd, synopsis string) *cliFlags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	// The flag package's own messages list every flag; ours say one line.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cliFlags{FlagSet: fs, cmd: cmd, synopsis: synopsis, heading: map[string]string{}, hints: map[string]string{}}
}

// group puts every flag registered since the last call under heading, so
// a command groups its flags by registering them group by group. A
// heading used twice collects both sets of flags.
func (c *cliFlags) group(heading string) {
	added := false
	c.VisitAll(func(f *flag.Flag) {
		if _, ok := c.heading[f.Name]; !ok {
			c.heading[f.Name] = heading
			added = true
		}
	})
	if added && !slices.Contains(c.headings, heading) {
		c.headings = append(c.headings, heading)
	}
}

// place puts the named flags under heading, wherever they were
// registered; a name that is not a flag is a mistake in the program.
func (c *cliFlags) place(heading string, names ...string) {
	for _, n := range names {
		if c.Lookup(n) == nil {
			panic(fmt.Sprintf("crowdtrain %s: no flag --%s to place under %q", c.cmd, n, heading))
		}
		c.heading[n] = heading
	}
	if !slices.Contains(c.headings, heading) {
		c.headings = append(c.headings, heading)
	}
}

// flagGroup is one heading of the help and its flags, sorted by name.
type flagGroup struct {
	heading string
	flags   []*flag.Flag
}

// groups returns the flags by heading, in the order the headings were
// made; flags registered after the last group call come last, under
// "Flags" when the command has no other group, else "Other".
func (c *cliFlags) groups() []flagGroup {
	var out []flagGroup
	index := map[string]int{}
	for _, h := range c.headings {
		index[h] = len(out)
		out = append(out, flagGroup{heading: h})
	}
	c.VisitAll(func(f *flag.Flag) {
		h, ok := c.heading[f.Name]
		if !ok {
			h = "Other"
			if len(c.headings) == 0 {
				h = "Flags"
			}
		}
		i, ok := index[h]
		if !ok {
			i = len(out)
			index[h] = i
			out = append(out, flagGroup{heading: h})
		}
		out[i].flags = append(out[i].flags, f)
	})
	return out
}

// printHelp writes the command's help: its synopsis and its flags by
// group, each as --name ARG with its default.
func (c *cliFlags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: crowdtrain %s\n", c.synopsis)
	for _, g := range c.groups() {
		fmt.Fprintf(w, "\n%s:\n", g.heading)
		for _, f := range g.flags {
			arg, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if arg != "" {
				line += " " + arg
			}
			if d := c.shownDefault(f); d != "" {
				line += "   (default " + d + ")"
			}
			fmt.Fprintln(w, line)
			for _, l := range wrap(usage, 72) {
				fmt.Fprintln(w, "        "+l)
			}
		}
	}
	if c.layered {
		fmt.Fprintf(w, "\nEvery flag can also be set in the environment as CROWDTRAIN_<FLAG> (upper case, - as _: %s)\n"+
			"or in the YAML file --config names (%s). The command line wins over the environment,\n"+
			"the environment over the file, and the file over the defaults; --print-config shows the result.\n",
			envName("admin-token"), "admin-token: ...")
	}
}

// shownDefault is a flag's default as help shows it: "" for an empty
// string or a false bool, and a secret's default (status's --token is
// $CROWDTRAIN_ADMIN_TOKEN) redacted.
func (c *cliFlags) shownDefault(f *flag.Flag) string {
	d := f.DefValue
	if d == "" || isBoolFlag(f) && d == "false" {
		return ""
	}
	if isSecret(f) {
		return redacted
	}
	if strings.ContainsAny(d, " \t") {
		return fmt.Sprintf("%q", d)
	}
	return d
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// parse parses args, which hold flags only: an argument left over is a
// usage error.
func (c *cliFlags) parse(ctx context.Context, args []string, stderr io.Writer) error {
	if err := c.parseMixed(ctx, args, stderr, nil); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usagef("unexpected arguments %q ('crowdtrain %s -h' lists the flags)", c.Args(), c.cmd)
	}
	return nil
}

// parseMixed parses args, in which flags may come before, between and
// after positional arguments (`jobs pause ID --coordinator URL`) when
// positional is not nil; the positional arguments are appended to it.
func (c *cliFlags) parseMixed(ctx context.Context, args []string, stderr io.Writer, positional *[]string) error {
	if d, ok := ctx.Value(describeKey{}).(*describer); ok {
		d.flags = c
		return errDescribed
	}
	for {
		if err := c.FlagSet.Parse(args); err != nil {
			return c.parseError(err, stderr)
		}
		if positional == nil || c.NArg() == 0 {
			return nil
		}
		*positional = append(*positional, c.Arg(0))
		args = c.Args()[1:]
	}
}

// parseError turns the flag package's error into ours: -h prints the
// help; an unknown flag is one line naming the nearest flags.
func (c *cliFlags) parseError(err error, stderr io.Writer) error {
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(stderr)
		return flag.ErrHelp
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		return usagef("%s", c.unknownFlag(strings.TrimPrefix(name, "-")))
	}
	// The flag package names flags with one dash; our help, with two.
	msg := strings.NewReplacer("for flag -", "for flag --", "argument: -", "argument: --").Replace(err.Error())
	return usagef("%s ('crowdtrain %s -h' lists the flags)", msg, c.cmd)
}

// unknownFlag says that name is not one of the command's flags, and which
// it may have meant.
func (c *cliFlags) unknownFlag(name string) string {
	if h, ok := c.hints[name]; ok {
		return h
	}
	msg := fmt.Sprintf("unknown flag --%s", name)
	if near := c.nearest(name); len(near) > 0 {
		for i := range near {
			near[i] = "--" + near[i]
		}
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return msg + fmt.Sprintf(" ('crowdtrain %s -h' lists the flags)", c.cmd)
}

// nearest returns up to three of the command's flag names closest to
// name: those that start with it (--admin for --admin-token), else those
// within an edit distance of half the name's length (at least 2).
func (c *cliFlags) nearest(name string) []string {
	type cand struct {
		name string
		dist int
	}
	var cands, prefixed []cand
	limit := max(2, (len(name)+1)/2)
	c.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			prefixed = append(prefixed, cand{f.Name, d})
		}
		if d <= limit {
			cands = append(cands, cand{f.Name, d})
		}
	})
	if len(prefixed) > 0 {
		cands = prefixed // --admin: --admin-token, not also --addr
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].dist < cands[j].dist })
	var out []string
	for _, cd := range cands[:min(3, len(cands))] {
		out = append(out, cd.name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describeKey marks a context in which commands hand over their flag
// set instead of running: the completion scripts and the documentation
// test read the flag sets the commands really build.
type describeKey struct{}

type describer struct{ flags *cliFlags }

// errDescribed is what a command returns when it handed over its flags.
var errDescribed = errors.New("flags described")

// describeFlags returns the flag set that `crowdtrain args...` builds,
// without running it; nil for a command this build does not have (serve
// without cgo) or one that takes no flags before running.
func describeFlags(args ...string) *cliFlags {
	d := &describer{}
	ctx := context.WithValue(context.Background(), describeKey{}, d)
	run(ctx, args, io.Discard, io.Discard)
	return d.flags
}
