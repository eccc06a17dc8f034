//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// protocolStdout keeps the real stdout for protocol messages and points fd 1 at stderr, so
// that anything a library prints lands where cachemark keeps it for error messages.
func protocolStdout() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "protocol-stdout"), nil
}
