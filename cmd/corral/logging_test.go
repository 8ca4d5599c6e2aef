package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

func TestLogFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		json bool
		err  string
	}{
		{nil, false, ""},
		{[]string{"-log-format", "json"}, true, ""},
		{[]string{"-log-format", "text", "-log-level", "debug"}, false, ""},
		{[]string{"-log-format", "xml"}, false, "-log-format"},
		{[]string{"-log-level", "loud"}, false, "-log-level"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := addLogFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		log, err := f.logger(&b)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one about %s", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		log.Info("request", "id", "a b")
		var rec map[string]any
		isJSON := json.Unmarshal(b.Bytes(), &rec) == nil
		if isJSON != tc.json || (tc.json && (rec["msg"] != "request" || rec["id"] != "a b")) ||
			(!tc.json && !strings.Contains(b.String(), `msg=request id="a b"`)) {
			t.Errorf("%q: logged %q", tc.args, b.String())
		}
	}
}
