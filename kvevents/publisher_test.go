package kvevents_test

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"

	"github.com/corral-llm/corral/kvevents"
)

// The subscribers here are go-zeromq's, a ZeroMQ implementation nobody
// here wrote; deploy/picker's TestKVEventsIndex subscribes with libzmq
// through llm-d's indexer, and decodes the batches.

func TestMain(m *testing.M) {
	// go-zeromq's sockets leave goroutines behind after Close; ours must
	// not, and goleak checks the rest.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*socket).connReaper"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*qreader).listen"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*Conn).read"))
}

// subscriber receives messages into a channel until the test ends.
func subscriber(t *testing.T, sub zmq4.Socket) <-chan zmq4.Msg {
	t.Helper()
	ch := make(chan zmq4.Msg, 4096)
	go func() {
		defer close(ch)
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			ch <- m
		}
	}()
	t.Cleanup(func() {
		sub.Close()
		for range ch {
		}
	})
	return ch
}

var stored = []kvevents.Event{{Kind: kvevents.Stored, Hashes: []kvevents.Hash{{1}}, Tokens: make([]int32, kvevents.BlockSize)}}

// firstMessage publishes on s until a message reaches ch: a subscription
// takes a moment to reach the publisher, and ZeroMQ drops what no
// subscriber asked for yet.
func firstMessage(t *testing.T, s *kvevents.Stream, ch <-chan zmq4.Msg) zmq4.Msg {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		s.Publish(stored)
		select {
		case m := <-ch:
			return m
		case <-tick.C:
		case <-deadline:
			t.Fatal("no message reached the subscriber")
		}
	}
}

func seq(t *testing.T, m zmq4.Msg) uint64 {
	t.Helper()
	if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
		t.Fatalf("a message of %d frames; want topic, 8-byte sequence number, payload", len(m.Frames))
	}
	return binary.BigEndian.Uint64(m.Frames[1])
}

// TestPublishBound: a bound publisher sends a subscriber the messages of
// its topics only, numbered per topic, and Close sends all that was
// published before it.
func TestPublishBound(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{})
	sub := zmq4.NewSub(context.Background())
	if err := sub.Dial("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@a"); err != nil {
		t.Fatal(err)
	}
	ch := subscriber(t, sub)
	a, b := p.Topic("kv@a@model"), p.Topic("kv@b@model")
	b.Publish(stored)
	m := firstMessage(t, a, ch)
	if topic := string(m.Frames[0]); topic != "kv@a@model" {
		t.Fatalf("topic %q", topic)
	}
	first := seq(t, m)
	const n = 200
	for range n {
		b.Publish(stored)
		a.Publish(stored)
	}
	p.Close()
	got := 0
	for got < n {
		m, ok := <-ch
		if !ok {
			break
		}
		if topic := string(m.Frames[0]); topic != "kv@a@model" {
			t.Fatalf("a message of topic %q reached a subscriber of kv@a", topic)
		}
		if s := seq(t, m); s <= first {
			continue // the first message's siblings, published while waiting
		} else if want := first + 1 + uint64(got); s != want {
			t.Fatalf("message %d: sequence number %d; want %d", got, s, want)
		}
		if p := m.Frames[2]; len(p) < 2 || p[0] != 0x93 || p[1] != 0xcb {
			t.Fatalf("payload % x…: not a msgpack [time, events, rank] batch", p[:min(8, len(p))])
		}
		got++
	}
	if got != n || p.Dropped() != 0 {
		t.Fatalf("%d of %d messages published before Close arrived, %d dropped", got, n, p.Dropped())
	}
}

// TestPublishDials: a publisher given a subscriber's address dials it,
// and dials again when the subscriber comes back after going away.
func TestPublishDials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ep, err := kvevents.ParseEndpoint("connect:tcp://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kvevents.NewPublisher(ep, kvevents.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.Topic("kv@pod@m")
	for round := range 2 {
		sub := zmq4.NewSub(context.Background())
		if err := sub.Listen("tcp://" + addr); err != nil {
			t.Fatal(err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
			t.Fatal(err)
		}
		ch := subscriber(t, sub)
		if m := firstMessage(t, s, ch); string(m.Frames[0]) != "kv@pod@m" {
			t.Fatalf("round %d: topic %q", round, m.Frames[0])
		}
		sub.Close()
	}
}

// TestEndpoints: the forms of an endpoint, what each binds or connects
// to, and the forms refused.
func TestEndpoints(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want kvevents.Endpoint
		str  string
	}{
		{"bind:tcp://127.0.0.1:5557", kvevents.Endpoint{Bind: true, Host: "127.0.0.1", Port: 5557}, "bind:tcp://127.0.0.1:5557"},
		{"bind:tcp://[::1]:5557", kvevents.Endpoint{Bind: true, Host: "::1", Port: 5557}, "bind:tcp://[::1]:5557"},
		{"bind:tcp://localhost:0", kvevents.Endpoint{Bind: true, Host: "localhost"}, "bind:tcp://localhost:0"},
		{"bind:tcp://*:5557", kvevents.Endpoint{Bind: true, Port: 5557}, "bind:tcp://*:5557"},
		{"tcp://*:5557", kvevents.Endpoint{Bind: true, Port: 5557, Wildcard: true}, "bind:tcp://*:5557"},
		{"tcp://indexer:5557", kvevents.Endpoint{Host: "indexer", Port: 5557}, "connect:tcp://indexer:5557"},
		{"connect:tcp://10.0.0.1:5557", kvevents.Endpoint{Host: "10.0.0.1", Port: 5557}, "connect:tcp://10.0.0.1:5557"},
	} {
		got, err := kvevents.ParseEndpoint(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("%q reads back as %q; want %q", tt.in, s, tt.str)
		}
	}
	for _, ep := range []string{"", "localhost:5557", "ipc:///tmp/x", "tcp://nohost", "tcp://:5557", "bind:tcp://:5557",
		"tcp://h:http", "tcp://h:70000", "tcp://h:0", "connect:tcp://*:5557", "connect:tcp://h:0", "bind:", "bind:localhost:5557", "listen:tcp://h:5557"} {
		if e, err := kvevents.ParseEndpoint(ep); err == nil {
			t.Errorf("%q accepted as %+v", ep, e)
		}
	}
}
