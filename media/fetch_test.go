package media

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestAddrClass: the addresses a listed name may not resolve to are told
// from public ones, an IPv4-mapped IPv6 address as its IPv4 address.
func TestAddrClass(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1":         "loopback",
		"::1":               "loopback",
		"::ffff:127.0.0.1":  "loopback",
		"::ffff:100.64.0.1": "shared (CGNAT)",
		"10.1.2.3":          "private",
		"172.16.0.1":        "private",
		"192.168.1.1":       "private",
		"fd00::1":           "private",
		"169.254.169.254":   "link-local",
		"fe80::1":           "link-local",
		"0.0.0.0":           "unspecified",
		"::":                "unspecified",
		"224.0.0.1":         "multicast",
		"ff02::1":           "multicast",
		"100.64.0.1":        "shared (CGNAT)",
		"0.1.2.3":           "this-network",
		"198.18.0.1":        "benchmarking",
		"255.255.255.255":   "reserved",
		"64:ff9b::a00:1":    "NAT64",
		"2002:a00:1::":      "6to4",
		"8.8.8.8":           "",
		"93.184.215.14":     "",
		"2606:4700::1111":   "",
		"::ffff:8.8.8.8":    "",
	} {
		if got := addrClass(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q; want %q", addr, got, want)
		}
	}
}

// TestFetcherHosts: hosts are listed and matched lower case, without
// brackets or a final dot, IP addresses in their canonical form; an entry
// with a wildcard, scheme, port or path is refused. A URL not http(s) is
// refused without a fetch.
func TestFetcherHosts(t *testing.T) {
	f, err := NewFetcher([]string{"Images.Example.", "[::1]", "0:0::2", "10.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"images.example": true, "IMAGES.EXAMPLE.": true, "::1": true, "[::2]": true, "10.0.0.1": true,
		"cdn.images.example": false, "example": false, "10.0.0.2": false, "": false,
	} {
		if got := f.hosts[canonicalHost(host)]; got != want {
			t.Errorf("%q listed: %v; want %v", host, got, want)
		}
	}
	if f.timeout != DefaultFetchTimeout {
		t.Errorf("timeout %s; want %s", f.timeout, DefaultFetchTimeout)
	}
	for _, bad := range []string{"*.example.com", "https://example.com", "example.com:8080", "example.com/images", "user@example.com"} {
		if _, err := NewFetcher([]string{bad}, 0); err == nil {
			t.Errorf("%q: listed; want it refused", bad)
		}
	}
	if _, err := NewFetcher(nil, 0); err == nil {
		t.Error("no hosts: a fetcher; want an error")
	}
	_, _, err = f.Fetch(context.Background(), "ftp://images.example/a.png", KindImage, Limits{})
	var me *Error
	if !errors.As(err, &me) || me.Kind != KindImage || !strings.Contains(me.Msg, "not http(s)") {
		t.Errorf("an ftp URL: %v; want it refused", err)
	}
}
