//go:build !unix

package store

import "os"

// openRegular opens the file at path with flag (os.O_RDONLY, os.O_RDWR,
// os.O_CREATE…), and returns it only when it is a regular file (see
// errNotRegular). Without O_NOFOLLOW, a link made between the check and
// the open is not caught.
func openRegular(path string, flag int) (*os.File, error) {
	if err := checkRegular(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = notRegular(path, "is not a regular file")
		}
		return nil, err
	}
	return f, nil
}
