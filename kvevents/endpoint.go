package kvevents

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Endpoint is where a Publisher's socket is: an address it binds, where
// subscribers connect, or the address of a subscriber that binds (llm-d's
// indexer), which the Publisher connects to.
type Endpoint struct {
	// Bind: the Publisher listens at Host:Port; else it connects there.
	Bind bool
	// Host is the address to bind ("" for every interface) or to connect
	// to.
	Host string
	// Port is the TCP port; 0 binds any free one (see Publisher.Addr).
	Port int
	// Wildcard says the endpoint was written tcp://*:PORT, as vLLM's and
	// ZeroMQ's: it binds every interface unless its user narrows it (corral
	// serve binds it where its HTTP listener listens). An explicit
	// bind:tcp://*:PORT is not a Wildcard: it means every interface.
	Wildcard bool
}

// ParseEndpoint reads an endpoint in one of these forms:
//
//	bind:tcp://HOST:PORT     listen on HOST (an address or a name; * for every interface)
//	connect:tcp://HOST:PORT  connect to a subscriber that listens on HOST:PORT
//	tcp://*:PORT             listen; the Wildcard its user may narrow
//	tcp://HOST:PORT          connect (as connect:)
//
// An IPv6 HOST is written in brackets: bind:tcp://[::1]:5557.
func ParseEndpoint(s string) (Endpoint, error) {
	var e Endpoint
	rest, explicit := s, ""
	for _, mode := range []string{"bind:", "connect:"} {
		if r, ok := strings.CutPrefix(s, mode); ok {
			rest, explicit = r, mode
		}
	}
	addr, ok := strings.CutPrefix(rest, "tcp://")
	if !ok {
		return e, fmt.Errorf("kv events endpoint %q: want bind:tcp://HOST:PORT, connect:tcp://HOST:PORT, tcp://*:PORT (bind) or tcp://HOST:PORT (connect)", s)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return e, fmt.Errorf("kv events endpoint %q: %w", s, err)
	}
	if e.Port, err = strconv.Atoi(port); err != nil || e.Port < 0 || e.Port > 65535 {
		return e, fmt.Errorf("kv events endpoint %q: port %q", s, port)
	}
	switch {
	case host == "":
		return e, fmt.Errorf("kv events endpoint %q: no host (bind:tcp://127.0.0.1:%s binds loopback, bind:tcp://*:%s every interface)", s, port, port)
	case explicit == "connect:" && host == "*":
		return e, fmt.Errorf("kv events endpoint %q: cannot connect to *", s)
	case explicit == "connect:" && e.Port == 0:
		return e, fmt.Errorf("kv events endpoint %q: cannot connect to port 0", s)
	case explicit == "bind:":
		e.Bind = true
		if host != "*" {
			e.Host = host
		}
	case host == "*":
		e.Bind, e.Wildcard = true, true
	default:
		if e.Port == 0 {
			return e, fmt.Errorf("kv events endpoint %q: cannot connect to port 0", s)
		}
		e.Host = host
	}
	return e, nil
}

// Addr is the endpoint's host:port, as net.Listen and net.Dial take it.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// String is the endpoint in the explicit form ParseEndpoint reads.
func (e Endpoint) String() string {
	if !e.Bind {
		return "connect:tcp://" + e.Addr()
	}
	if e.Host == "" {
		return "bind:tcp://" + net.JoinHostPort("*", strconv.Itoa(e.Port))
	}
	return "bind:tcp://" + e.Addr()
}
