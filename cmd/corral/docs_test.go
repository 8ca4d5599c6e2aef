package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
)

// TestServeFlagsDocumented: every flag `corral serve -h` lists appears in
// the README or a page of docs/, written in code as `-name` or `--name`
// (alone, or among a flag's spellings: `-c, --ctx-size`).
func TestServeFlagsDocumented(t *testing.T) {
	out, _ := exec.Command(testmodel.Binary(t), "serve", "-h").CombinedOutput() // -h exits 2
	flags := regexp.MustCompile(`(?m)^  -([\w-]+)`).FindAllStringSubmatch(string(out), -1)
	if len(flags) < 50 {
		t.Fatalf("corral serve -h lists %d flags:\n%s", len(flags), out)
	}
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs pages: %v %v", pages, err)
	}
	documented := map[string]bool{}
	spelling := regexp.MustCompile(`(?:^|[\s,(/])--?([a-zA-Z][\w-]*)`)
	for _, p := range append(pages, filepath.Join("..", "..", "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(b), -1) {
			for _, m := range spelling.FindAllStringSubmatch(code[1], -1) {
				documented[m[1]] = true
			}
		}
	}
	var missing []string
	for _, f := range flags {
		if !documented[f[1]] {
			missing = append(missing, "--"+f[1])
		}
	}
	if len(missing) > 0 {
		t.Errorf("corral serve flags no page of docs/ names: %s", strings.Join(missing, " "))
	}
}
