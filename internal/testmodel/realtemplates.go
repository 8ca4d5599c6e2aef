package testmodel

import (
	"os"
	"path/filepath"
	"testing"
)

// TemplatesDir returns the folder of real chat templates (the public
// models' own, as ../shared/templates/SOURCES.md says), next to the
// models' folder; the environment variable CORRAL_TEST_TEMPLATES
// overrides it.
func TemplatesDir() string {
	if d := os.Getenv("CORRAL_TEST_TEMPLATES"); d != "" {
		return d
	}
	return filepath.Join(Dir(), "..", "templates")
}

// Template returns the source of the named real chat template (its file
// name without .jinja), failing t when it is missing.
func Template(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(TemplatesDir(), name+".jinja"))
	if err != nil {
		t.Fatalf("real chat template %s missing (set CORRAL_TEST_TEMPLATES or provide ../shared/templates): %v", name, err)
	}
	return string(b)
}
