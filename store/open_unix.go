//go:build unix

package store

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openRegular opens the file at path with flag (os.O_RDONLY, os.O_RDWR,
// os.O_CREATE…) without following a symlink, and returns it only when it
// is a regular file with no other hard link (see errNotRegular). It opens
// without blocking, for a FIFO planted at path not to hang the open.
func openRegular(path string, flag int) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if err != nil {
		// The error for a symlink is ELOOP on Linux, another elsewhere.
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			return nil, notRegular(path, "is a symlink")
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
		err = &fs.PathError{Op: "stat", Path: path, Err: err}
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = notRegular(path, "is not a regular file")
	case st.Nlink > 1:
		err = notRegular(path, "has other hard links")
	default:
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}
