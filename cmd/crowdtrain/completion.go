package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// commandNames are crowdtrain's commands, as run dispatches them.
var commandNames = []string{"serve", "relay", "relay-credential", "work", "status", "submit", "jobs", "tokens",
	"volunteers", "backup", "bench", "export", "sample", "attack", "tokenizer", "version", "completion"}

// subcommandNames are the words that follow a command which has its own.
var subcommandNames = map[string][]string{
	"jobs":       {"list", "show", "pause", "resume", "stop", "patch"},
	"tokens":     {"issue", "list"},
	"volunteers": {"list", "ban", "pardon"},
	"completion": {"bash", "zsh", "fish"},
	"tokenizer":  {"train", "encode", "decode"},
}

// commandFlags returns the flags of a command, those of all its
// subcommands together for jobs, tokens and volunteers, read from the
// flag sets the commands build (describeFlags); none for a command this
// build lacks. Sorted by name, each once.
func commandFlags(cmd string) []*flag.Flag {
	var sets []*cliFlags
	if subs, ok := subcommandNames[cmd]; ok {
		for _, s := range subs {
			if fs := describeFlags(cmd, s); fs != nil {
				sets = append(sets, fs)
			}
		}
	} else if fs := describeFlags(cmd); fs != nil {
		sets = append(sets, fs)
	}
	var out []*flag.Flag
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if !slices.ContainsFunc(out, func(g *flag.Flag) bool { return g.Name == f.Name }) {
				out = append(out, f)
			}
		})
	}
	slices.SortFunc(out, func(a, b *flag.Flag) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// completionCmd prints a shell's completion script for crowdtrain.
func completionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("completion", "completion bash|zsh|fish   (bash: source <(crowdtrain completion bash); "+
		"zsh: the same, after compinit; fish: crowdtrain completion fish | source)")
	var shell []string
	if err := fs.parseMixed(ctx, args, stderr, &shell); err != nil {
		return err
	}
	if len(shell) != 1 {
		return usagef("name one shell: crowdtrain completion bash|zsh|fish")
	}
	switch shell[0] {
	case "bash":
		writeBashCompletion(stdout)
	case "zsh":
		writeZshCompletion(stdout)
	case "fish":
		writeFishCompletion(stdout)
	default:
		return usagef("no completion for shell %q: bash, zsh or fish", shell[0])
	}
	return nil
}

// flagWords is "--a --b ...", the command's flags as typed.
func flagWords(flags []*flag.Flag) string {
	var w []string
	for _, f := range flags {
		w = append(w, "--"+f.Name)
	}
	return strings.Join(w, " ")
}

// summary is the first clause of a flag's help, for the shells that show
// one beside each flag.
func summary(f *flag.Flag) string {
	_, u := flag.UnquoteUsage(f)
	for _, stop := range []string{"; ", ": ", " ("} {
		if i := strings.Index(u, stop); i > 0 {
			u = u[:i]
		}
	}
	u = strings.TrimSpace(u)
	if len(u) > 60 {
		u = strings.TrimSpace(u[:57]) + "..."
	}
	return u
}

// singleQuoted quotes s for a POSIX-like shell (bash, zsh) or fish.
func singleQuoted(s string, fish bool) string {
	if fish {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeBashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# bash completion for crowdtrain, made by 'crowdtrain completion bash' from its flags.
# Load it with: source <(crowdtrain completion bash)
_crowdtrain() {
    local cur=${COMP_WORDS[COMP_CWORD]} words=""
    if [[ $COMP_CWORD -eq 1 ]]; then
        words=%s
    else
        case "${COMP_WORDS[1]}" in
`, singleQuoted(strings.Join(commandNames, " "), false))
	for _, cmd := range commandNames {
		flags := singleQuoted(flagWords(commandFlags(cmd)), false)
		if subs, ok := subcommandNames[cmd]; ok {
			fmt.Fprintf(w, "            %s) if [[ $COMP_CWORD -eq 2 ]]; then words=%s; else words=%s; fi ;;\n",
				cmd, singleQuoted(strings.Join(subs, " "), false), flags)
			continue
		}
		fmt.Fprintf(w, "            %s) words=%s ;;\n", cmd, flags)
	}
	fmt.Fprint(w, `        esac
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _crowdtrain crowdtrain
`)
}

func writeZshCompletion(w io.Writer) {
	fmt.Fprint(w, `#compdef crowdtrain
# zsh completion for crowdtrain, made by 'crowdtrain completion zsh' from its flags.
# Load it with: source <(crowdtrain completion zsh)   (after compinit)
_crowdtrain() {
    local -a opts
    if (( CURRENT == 2 )); then
        opts=(`)
	for _, cmd := range commandNames {
		fmt.Fprintf(w, " %s", singleQuoted(cmd, false))
	}
	fmt.Fprint(w, `)
        _describe -t commands 'crowdtrain command' opts
        return
    fi
    case $words[2] in
`)
	for _, cmd := range commandNames {
		fmt.Fprintf(w, "        %s)\n", cmd)
		if subs, ok := subcommandNames[cmd]; ok {
			fmt.Fprintf(w, "            if (( CURRENT == 3 )); then\n                opts=(%s)\n                _describe -t commands 'subcommand' opts\n                return\n            fi\n",
				strings.Join(subs, " "))
		}
		fmt.Fprint(w, "            opts=(")
		for _, f := range commandFlags(cmd) {
			fmt.Fprintf(w, "\n                %s", singleQuoted("--"+f.Name+":"+summary(f), false))
		}
		fmt.Fprint(w, ")\n            ;;\n")
	}
	fmt.Fprint(w, `    esac
    if [[ $PREFIX == -* ]]; then
        _describe -t options 'flag' opts
    else
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _crowdtrain "$@"
else
    compdef _crowdtrain crowdtrain
fi
`)
}

func writeFishCompletion(w io.Writer) {
	fmt.Fprint(w, "# fish completion for crowdtrain, made by 'crowdtrain completion fish' from its flags.\n"+
		"# Load it with: crowdtrain completion fish | source\n"+
		"complete -c crowdtrain -f\n")
	fmt.Fprintf(w, "complete -c crowdtrain -n __fish_use_subcommand -a %s\n", singleQuoted(strings.Join(commandNames, " "), true))
	for _, cmd := range commandNames {
		cond := singleQuoted("__fish_seen_subcommand_from "+cmd, true)
		if subs, ok := subcommandNames[cmd]; ok {
			fmt.Fprintf(w, "complete -c crowdtrain -n %s -a %s\n", cond, singleQuoted(strings.Join(subs, " "), true))
		}
		for _, f := range commandFlags(cmd) {
			takes := " -r -F" // a value, often a file
			if isBoolFlag(f) {
				takes = ""
			}
			fmt.Fprintf(w, "complete -c crowdtrain -n %s -l %s%s -d %s\n", cond, f.Name, takes, singleQuoted(summary(f), true))
		}
	}
}
