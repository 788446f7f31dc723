package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Command is one subcommand of a binary: a row of its Program's table.
type Command struct {
	Name string
	// Summary is the command's line in the usage. A command without one
	// is dispatched but not listed (a name kept to say where a command
	// went).
	Summary string
	// Run runs the command with the arguments after its name.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Program is a binary's command line: a table of commands, and the usage
// text generated from it.
type Program struct {
	Name  string // the binary, as its usage names it: "sluice"
	Title string // the usage's first line
	// Note, if set, is a paragraph printed after the command list.
	Note     string
	Commands []Command
}

// Run dispatches args (without the program name) to the command they
// name. No arguments print the usage to stderr (a usage error); help, -h,
// -help and --help print it to stdout; --version and -version run the
// version command; an unknown name prints the usage to stderr after
// naming it. Each is a usage error (ErrUsage) where it is a mistake.
func (p *Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, p.Usage())
		return ErrUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, p.Usage())
		return nil
	case "--version", "-version":
		name = "version"
	}
	for _, c := range p.Commands {
		if c.Name == name {
			return c.Run(ctx, rest, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", name, p.Usage())
	return ErrUsage
}

// Usage is the program's usage text: its title, the listed commands with
// their summaries in table order, the note, and where to find a command's
// flags.
func (p *Program) Usage() string {
	width := 0
	for _, c := range p.Commands {
		if c.Summary != "" {
			width = max(width, len(c.Name))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nUsage:\n  %s <command> [flags]\n\nCommands:\n", p.Title, p.Name)
	for _, c := range p.Commands {
		if c.Summary != "" {
			fmt.Fprintf(&b, "  %-*s%s\n", width+3, c.Name, c.Summary)
		}
	}
	if p.Note != "" {
		fmt.Fprintf(&b, "\n%s\n", p.Note)
	}
	fmt.Fprintf(&b, "\nRun %q for a command's flags.\n", p.Name+" <command> --help")
	return b.String()
}

// VersionCommand is the version command of program: it prints
// Version(program) to stdout.
func VersionCommand(program string) Command {
	return Command{
		Name:    "version",
		Summary: "print the version",
		Run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			fs := NewFlags(program, "version", "", "Print the version of this "+program+" binary.", stderr)
			if err := fs.Parse(args); err != nil {
				return FlagErr(err)
			}
			fmt.Fprintln(stdout, Version(program))
			return nil
		},
	}
}

// Version describes the running binary as program: module version and
// VCS revision when the build recorded them.
func Version(program string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return program + " (unknown build)"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	out := program + " " + v + " (" + info.GoVersion
	if rev != "" {
		out += ", " + rev + modified
	}
	return out + ")"
}
