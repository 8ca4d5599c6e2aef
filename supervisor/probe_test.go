package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	line := "1234 (my (odd) cmd) S 1 4321 4321 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 99 0 0"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.state != 'S' || st.pgrp != 4321 || st.cpuTicks != 325 {
		t.Fatalf("got %+v, want state S, pgrp 4321, 325 ticks", st)
	}
	for _, bad := range []string{"", "1234 no parens", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted", bad)
		}
	}
}

func TestGroupCPUFindsOwnGroup(t *testing.T) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseProcStat(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.pgrp != syscall.Getpgrp() {
		t.Fatalf("pgrp %d, want %d", st.pgrp, syscall.Getpgrp())
	}
	_, live := groupCPU(st.pgrp)
	if live < 1 {
		t.Fatalf("groupCPU found %d live members of our own group", live)
	}
}

func TestProbeReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[]}`)
		case "/notjson":
			fmt.Fprint(w, `<html>`)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":"loading"}`)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := probeReady(ctx, srv.Client(), srv.URL, ReadinessProbe{}); err != nil {
		t.Errorf("default probe: %v", err)
	}
	if err := probeReady(ctx, srv.Client(), srv.URL, ReadinessProbe{Path: "/notjson"}); err == nil {
		t.Error("non-JSON body accepted")
	}
	if err := probeReady(ctx, srv.Client(), srv.URL, ReadinessProbe{Path: "/health"}); err == nil {
		t.Error("503 accepted")
	}
	srv.Close()
	if err := probeReady(ctx, http.DefaultClient, srv.URL, ReadinessProbe{}); err == nil {
		t.Error("closed server accepted")
	}
}
