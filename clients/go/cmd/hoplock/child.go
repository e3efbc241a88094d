package main

// The command hoplock run runs: started in a process group of its own, so
// that a stop reaches every process of it (a shell and its children), and
// killed by the kernel should hoplock itself die (Linux's parent-death
// signal), so that it never runs on unsupervised by a lease nobody renews.

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// child is a running command.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited and been waited for
	err  error         // what Wait returned
}

// startChild starts argv with env, or returns the exit status that says
// why it could not (exitNotFound, exitNoExec) and the error.
func startChild(argv []string, env []string) (*child, int, error) {
	c := &child{done: make(chan struct{})}
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Env = env
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the thread that
		// started the child ends: keep this goroutine on that thread
		// until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := c.cmd.Start()
		started <- err
		if err != nil {
			return
		}
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, exitNotFound, err
		}
		return nil, exitNoExec, err
	}
	return c, 0, nil
}

// signal sends sig to the command's process group.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// status is the command's exit status once it has exited: its own, or
// 128+N if signal N ended it.
func (c *child) status() int {
	ps := c.cmd.ProcessState
	if ps == nil {
		return exitFailed
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
