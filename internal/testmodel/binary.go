package testmodel

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// BinaryEnv names the environment variable holding the path of a prebuilt
// corral binary. `make test` sets it to bin/corral, built once with the
// Makefile's cgo flags, so that no test package compiles llama.cpp again.
const BinaryEnv = "CORRAL_BIN"

// binaryPkg is the import path of the corral command.
const binaryPkg = "github.com/corral-llm/corral/cmd/corral"

var (
	buildOnce sync.Once
	builtDir  string // temp folder of the binary built here; "" if none
	builtPath string
	buildErr  error
)

// Binary returns the path of the corral binary for end-to-end tests,
// failing t when there is none (see BinaryPath).
func Binary(t testing.TB) string {
	t.Helper()
	p, err := BinaryPath()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BinaryPath returns the path of the corral binary for end-to-end tests.
//
// With $CORRAL_BIN set it is that file, which must exist: a missing one is
// an error, never a reason to build another. Otherwise (plain `go test`)
// ./cmd/corral is built once per test process into a temporary folder,
// with the environment's cgo flags as they are: export the Makefile's
// CGO_CFLAGS/CGO_CXXFLAGS so that llama.cpp's objects come from the build
// cache. A TestMain that may have built it calls RemoveBinary at the end.
func BinaryPath() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("$%s=%q: %v", BinaryEnv, p, err)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return "", fmt.Errorf("$%s=%q: the corral binary is missing (run `make build`, or unset %s to build one): %v", BinaryEnv, p, BinaryEnv, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("$%s=%q is not an executable file (mode %s)", BinaryEnv, p, fi.Mode())
		}
		return abs, nil
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-test-bin-")
		if err != nil {
			buildErr = fmt.Errorf("build corral: %v", err)
			return
		}
		bin := filepath.Join(dir, "corral")
		cmd := exec.Command("go", "build", "-o", bin, binaryPkg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.RemoveAll(dir)
			buildErr = fmt.Errorf("go build %s (set $%s to skip building): %v\n%s", binaryPkg, BinaryEnv, err, out)
			return
		}
		builtDir, builtPath = dir, bin
	})
	if buildErr != nil {
		return "", buildErr
	}
	if builtPath == "" {
		return "", errors.New("corral binary already removed (RemoveBinary was called)")
	}
	return builtPath, nil
}

// RemoveBinary deletes the binary BinaryPath built, if it built one. It
// never touches $CORRAL_BIN. Call it once the tests are over.
func RemoveBinary() {
	buildOnce.Do(func() {}) // no build from now on
	if builtDir != "" {
		os.RemoveAll(builtDir)
		builtDir, builtPath = "", ""
	}
}
