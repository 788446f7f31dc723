package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// testProgram has a listed command that echoes its arguments, a hidden
// one, and the version command.
func testProgram() *Program {
	echo := func(_ context.Context, args []string, stdout, _ io.Writer) error {
		_, err := io.WriteString(stdout, "echo "+strings.Join(args, " ")+"\n")
		return err
	}
	fail := func(context.Context, []string, io.Writer, io.Writer) error { return errors.New("boom") }
	return &Program{
		Name:  "tool",
		Title: "tool — a test program.",
		Note:  "A note after the commands.",
		Commands: []Command{
			{Name: "echo", Summary: "print the arguments", Run: echo},
			{Name: "long-name", Summary: "fail", Run: fail},
			{Name: "hidden", Run: echo},
			VersionCommand("tool"),
		},
	}
}

// TestProgramUsage: the usage is generated from the table — listed
// commands in table order, summaries aligned past the longest name,
// hidden commands left out, the note, and where a command's flags are.
func TestProgramUsage(t *testing.T) {
	want := `tool — a test program.

Usage:
  tool <command> [flags]

Commands:
  echo        print the arguments
  long-name   fail
  version     print the version

A note after the commands.

Run "tool <command> --help" for a command's flags.
`
	if got := testProgram().Usage(); got != want {
		t.Errorf("usage:\n%s\nwant:\n%s", got, want)
	}
}

// TestProgramRun: each way into the dispatcher, its output stream and its
// exit status.
func TestProgramRun(t *testing.T) {
	usage := testProgram().Usage()
	for _, tt := range []struct {
		name           string
		args           []string
		stdout, stderr string // prefixes; "" for empty
		code           int
	}{
		{"no arguments: usage on stderr", nil, "", usage, 2},
		{"help", []string{"help"}, usage, "", 0},
		{"-h", []string{"-h"}, usage, "", 0},
		{"-help", []string{"-help"}, usage, "", 0},
		{"--help", []string{"--help"}, usage, "", 0},
		{"a command with its arguments", []string{"echo", "a", "--b"}, "echo a --b\n", "", 0},
		{"a hidden command", []string{"hidden", "x"}, "echo x\n", "", 0},
		{"a command's error", []string{"long-name"}, "", "", 1},
		{"unknown", []string{"frobnicate"}, "", "unknown command \"frobnicate\"\n\n" + usage, 2},
		{"a flag is no command", []string{"--nope"}, "", "unknown command \"--nope\"\n\n", 2},
		{"version", []string{"version"}, "tool ", "", 0},
		{"--version", []string{"--version"}, "tool ", "", 0},
		{"-version", []string{"-version"}, "tool ", "", 0},
		{"version --help", []string{"version", "--help"}, "", "Usage: tool version [flags]", 0},
		{"--version --help", []string{"--version", "--help"}, "", "Usage: tool version [flags]", 0},
		{"version --nope", []string{"version", "--nope"}, "", "flag provided but not defined: -nope", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := testProgram().Run(context.Background(), tt.args, &stdout, &stderr)
			if got := ExitCode(err); got != tt.code {
				t.Errorf("exit status %d (%v), want %d", got, err, tt.code)
			}
			for _, s := range []struct {
				what      string
				got, want string
			}{{"stdout", stdout.String(), tt.stdout}, {"stderr", stderr.String(), tt.stderr}} {
				if s.want == "" && s.got != "" || !strings.HasPrefix(s.got, s.want) {
					t.Errorf("%s = %q, want it to start with %q", s.what, s.got, s.want)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	// A test binary records its build: "tool dev (go1.x…)" or a module
	// version.
	if v := Version("tool"); !strings.HasPrefix(v, "tool ") || !strings.Contains(v, "go1.") {
		t.Errorf("Version = %q", v)
	}
}
