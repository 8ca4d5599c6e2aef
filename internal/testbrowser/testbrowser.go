// Package testbrowser finds the Chromium that browser tests drive.
//
// Like a missing test model (package testmodel), a missing browser fails
// the test: it never skips, so that CI, where `make test` installs
// Debian's chromium first (the Makefile's browser step), cannot pass
// without running the browser tests.
package testbrowser

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Env names the environment variable that may hold the browser's path.
const Env = "CORRAL_CHROMIUM"

// DefaultPath is where Debian's chromium package puts the browser.
const DefaultPath = "/usr/bin/chromium"

// ScreenshotsEnv names the environment variable holding the folder where
// browser tests save their screenshots; unset, they go to a temporary
// folder removed after the test.
const ScreenshotsEnv = "CORRAL_SCREENSHOTS"

// Path returns the Chromium to run: $CORRAL_CHROMIUM when set, else
// /usr/bin/chromium, else the first of chromium, chromium-browser,
// google-chrome found in $PATH. It fails t when there is none.
func Path(t testing.TB) string {
	t.Helper()
	p, err := find()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func find() (string, error) {
	if p := os.Getenv(Env); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("$%s=%q is not an executable browser: %v", Env, p, err)
		}
		return p, nil
	}
	candidates := []string{DefaultPath, "chromium", "chromium-browser", "google-chrome"}
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	ci := ""
	if os.Getenv("CI") != "" {
		ci = " (CI must have it: `make test` installs it)"
	}
	return "", fmt.Errorf("no Chromium for the browser tests%s: run `make browser` (apt-get install chromium) or set $%s; looked for %v", ci, Env, candidates)
}

// ScreenshotDir returns the folder for t's screenshots: $CORRAL_SCREENSHOTS,
// created if need be, or a temporary folder.
func ScreenshotDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(ScreenshotsEnv)
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("$%s: %v", ScreenshotsEnv, err)
	}
	return dir
}
