package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/corral-llm/corral/supervisor/process"
)

func TestGroupCPUFindsOwnGroup(t *testing.T) {
	_, live := process.GroupCPU(syscall.Getpgrp())
	if live < 1 {
		t.Fatalf("GroupCPU found %d live members of our own group", live)
	}
	if !slices.Contains(liveGroupMembers(syscall.Getpgrp()), os.Getpid()) {
		t.Fatalf("liveGroupMembers(%d) lacks our own pid %d", syscall.Getpgrp(), os.Getpid())
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
