// Command rusage runs a command and writes what the kernel accounted to it,
// one key=value a line, to a file (or stderr):
//
//	rusage -o /tmp/usage.txt kube-ipvs agent --manifests /tmp/m --once
//	wall_s=43.512
//	user_s=40.110
//	sys_s=10.402
//	maxrss_kb=248732
//
// maxrss_kb is ru_maxrss as wait4 returns it, in KiB on Linux: the peak
// resident size of the command or of the largest of its own children. It
// exists because busybox's `time -v` prints ru_maxrss as if it counted
// pages, four times too large on a 4 KiB page. The command's output and
// input are its own; rusage exits with the command's status (128 + the
// signal if one killed it), 127 if it could not be started, 2 on a usage
// error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rusage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the usage to this file instead of stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: rusage [-o FILE] COMMAND [ARG...]")
		return 2
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(stderr, "rusage:", err)
		return 127
	}
	if err := report(*out, stderr, wall, cmd.ProcessState); err != nil {
		fmt.Fprintln(stderr, "rusage:", err)
		return 2
	}
	return status(cmd.ProcessState)
}

// report writes the usage to the file named out, or to stderr without one.
func report(out string, stderr io.Writer, wall time.Duration, ps *os.ProcessState) error {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return fmt.Errorf("no resource usage on this system")
	}
	text := fmt.Sprintf("wall_s=%.3f\nuser_s=%.3f\nsys_s=%.3f\nmaxrss_kb=%d\n",
		wall.Seconds(), ps.UserTime().Seconds(), ps.SystemTime().Seconds(), ru.Maxrss)
	if out == "" {
		_, err := io.WriteString(stderr, text)
		return err
	}
	return os.WriteFile(out, []byte(text), 0o644)
}

// status is the shell's exit status for how the command ended.
func status(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
