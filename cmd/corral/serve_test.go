package main

import (
	"context"
	"strings"
	"testing"
)

// TestServeSchedulingFlags: corral serve refuses a --cache-isolation it
// does not know and a --max-pause that is not positive, naming the flag,
// before it loads anything.
func TestServeSchedulingFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--cache-isolation=tenant"}, `--cache-isolation "tenant": want none or key`},
		{[]string{"--max-pause=0"}, "--max-pause 0s: want a positive duration"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}
