package kvevents_test

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/kvevents/kvtest"
)

// What a subscriber can make a publisher hold, or leak, is bounded (issue
// 31, findings 2 and 3).

// TestBindNamedAddress: bind:tcp://127.0.0.1:0 listens on loopback, not
// on every interface (finding 2: a named address used to be dialled).
func TestBindNamedAddress(t *testing.T) {
	ep, err := kvevents.ParseEndpoint("bind:tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := kvevents.NewPublisher(ep, kvevents.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr, ok := p.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() {
		t.Fatalf("bound %v; want a loopback address", p.Addr())
	}
	s := dial(t, addr.String())
	subscribe(t, s, "")
}

// TestBindWarnsOffLoopback: a publisher that binds an address other
// hosts can reach says so in its log, and one on loopback does not.
func TestBindWarnsOffLoopback(t *testing.T) {
	for _, tt := range []struct {
		ep   kvevents.Endpoint
		warn bool
	}{
		{kvevents.Endpoint{Bind: true}, true}, // every interface
		{kvevents.Endpoint{Bind: true, Host: "127.0.0.1"}, false},
	} {
		var log logBuffer
		p, err := kvevents.NewPublisher(tt.ep, kvevents.Options{Log: log.logger()})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		if got := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "plaintext"); got != tt.warn {
			t.Errorf("%v: warned %v; want %v. Log:\n%s", tt.ep, got, tt.warn, log.String())
		}
	}
}

// TestOmitTokens: with OmitTokens, a BlockStored event keeps its token
// ids field, empty (llm-d decodes the field), in a batch as in a
// restatement, and names its blocks all the same.
func TestOmitTokens(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{OmitTokens: true})
	s := p.Topic("kv@pod@m")
	a := dial(t, addr)
	subscribe(t, a, "kv@")
	s.Publish([]kvevents.Event{{Kind: kvevents.Stored, Hashes: []kvevents.Hash{hash(1), hash(2)}, Tokens: tokens(2*kvevents.BlockSize, 1000)}})
	batch := recv(t, a) // once a has it, b joins a topic with a state
	b := dial(t, addr)
	restated := subscribe(t, b, "kv@")
	if len(restated) == 0 {
		restated = append(restated, recv(t, b))
	}
	// Counted before it is sent. a's own subscription may reach the
	// encoder only after the first batch, and then a is restated too
	// (and b's waits for RestateInterval): one or two, never none.
	if n := p.Restates(); n != 1 && n != 2 {
		t.Fatalf("%d restatements; want b's, and perhaps a's", n)
	}
	for _, m := range []kvtest.Message{batch, restated[0]} { // the batch; the restatement
		evs := decode(t, m).Events
		if len(evs) != 1 || evs[0].Kind != "BlockStored" || len(evs[0].Hashes) != 2 {
			t.Fatalf("events %+v; want one BlockStored of two blocks", evs)
		}
		if e := evs[0]; !e.TokensField || len(e.Tokens) != 0 {
			t.Errorf("token ids %v (field there: %v); want an empty list", e.Tokens, e.TokensField)
		}
	}
}

// TestSubscriptionFloodBounded: subscribers that send a publisher
// thousands of large subscriptions do not make it hold them (finding 3:
// 8 connections of 1,024 SUBSCRIBEs of 65 KB took 620 MB). The bound is
// on the live heap, read after a collection while the subscribers are
// still connected.
func TestSubscriptionFloodBounded(t *testing.T) {
	_, addr := bindLoopback(t, kvevents.Options{})
	before := heapInUse()
	const conns, subs, size = 8, 1024, 65000 // a frame of 65,010 bytes: under ZMTP's old 64 KiB cap
	topic := make([]byte, size)
	for range conns {
		s := dial(t, addr)
		for i := range subs {
			binary.BigEndian.PutUint32(topic, uint32(i)) // distinct topics
			if _, err := s.Write(kvtest.Command("SUBSCRIBE", topic)); err != nil {
				break // cut
			}
		}
		s.Sync() // the publisher has read all, unless it cut the connection
	}
	const bound = 32 << 20
	if held := int64(heapInUse()) - int64(before); held > bound {
		t.Errorf("the publisher holds %d MiB after the flood; want at most %d MiB", held>>20, bound>>20)
	}
}

// TestSubscriptionBytesCapped: a subscriber whose subscriptions pass
// MaxSubscriptionBytes is cut; one within it is served.
func TestSubscriptionBytesCapped(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{MaxSubscriptionBytes: 1024})
	ok := dial(t, addr)
	subscribe(t, ok, "kv@a")
	subscribe(t, ok, "kv@b")
	greedy := dial(t, addr)
	for i := range 32 {
		if err := greedy.Subscribe(strings.Repeat("x", 100) + string(rune('a'+i))); err != nil {
			break
		}
	}
	cut(t, greedy, "subscribed 32 × 101 bytes past a 1,024-byte bound")
	s := p.Topic("kv@a@m")
	s.Publish([]kvevents.Event{{Kind: kvevents.Cleared}})
	if m := recv(t, ok); m.Topic != "kv@a@m" {
		t.Errorf("the subscriber within its bound got %q", m.Topic)
	}
}

// TestPeerCap: past MaxPeers a publisher closes a new connection at once,
// and takes one again when a subscriber goes.
func TestPeerCap(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{MaxPeers: 2})
	a, b := dial(t, addr), dial(t, addr)
	subscribe(t, a, "")
	subscribe(t, b, "")
	if s, err := kvtest.Dial(addr, patience); err == nil {
		s.Subscribe("")
		_, err = s.Sync()
		s.Close()
		if err == nil {
			t.Fatal("a third subscriber was served past MaxPeers 2")
		}
	}
	waitFor(t, "refusal counted", func() bool { return p.Refused() == 1 })
	a.Close()
	waitFor(t, "the subscriber gone", func() bool { return p.Subscribers() == 1 })
	c := dial(t, addr)
	subscribe(t, c, "")
}

// TestIdleSubscriberCut: a subscriber that completes its handshake and
// subscribes to nothing is cut after SubscribeTimeout (here a
// nanosecond: the test waits for the cut, not for the time).
func TestIdleSubscriberCut(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{SubscribeTimeout: 1})
	never := dial(t, addr)
	cut(t, never, "a subscriber that never subscribed")
	waitFor(t, "no subscriber left", func() bool { return p.Subscribers() == 0 })
}

// TestStuckSubscriberCut: a subscriber that takes no bytes while a
// message waits for it is cut after WriteTimeout (here a nanosecond).
func TestStuckSubscriberCut(t *testing.T) {
	p, addr := bindLoopback(t, kvevents.Options{WriteTimeout: 1})
	s := dial(t, addr)
	if err := s.Subscribe(""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscriber in", func() bool { return p.Subscribers() == 1 })
	topic := p.Topic("kv@pod@m")
	waitFor(t, "the stuck subscriber cut", func() bool {
		topic.Publish([]kvevents.Event{{Kind: kvevents.Cleared}})
		return p.Subscribers() == 0
	})
}

// TestSlowGreetingCut: a connection that sends no greeting is cut after
// HandshakeTimeout.
func TestSlowGreetingCut(t *testing.T) {
	_, addr := bindLoopback(t, kvevents.Options{HandshakeTimeout: 1})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readToEOF(t, conn, "a connection silent in its handshake")
}

// TestOversizedFrameCut: a subscriber that announces a frame larger than
// a subscription may be is cut before the publisher reads it.
func TestOversizedFrameCut(t *testing.T) {
	_, addr := bindLoopback(t, kvevents.Options{})
	s := dial(t, addr)
	head := binary.BigEndian.AppendUint64([]byte{0x04 | 0x02}, 1<<30) // a 1 GiB command
	if _, err := s.Write(head); err != nil {
		t.Fatal(err)
	}
	cut(t, s, "a subscriber that announced a 1 GiB frame")
}

// TestSlowSubscriberQueueBounded: what waits for a subscriber that does
// not read is bounded in bytes (MaxQueueBytes): the rest is dropped and
// counted, and a reading subscriber misses nothing.
func TestSlowSubscriberQueueBounded(t *testing.T) {
	const queue = 1 << 20
	p, addr := bindLoopback(t, kvevents.Options{MaxQueueBytes: queue, WriteTimeout: patience})
	stuck := dial(t, addr)
	subscribe(t, stuck, "kv@big")
	marker := dial(t, addr)
	subscribe(t, marker, "kv@marker")
	before := heapInUse()
	// One batch of 1,000 blocks: about 80 KB on the wire.
	const blocks = 1000
	ev := kvevents.Event{Kind: kvevents.Stored, Tokens: tokens(blocks*kvevents.BlockSize, 300)}
	for i := range blocks {
		ev.Hashes = append(ev.Hashes, hash(i))
	}
	big, mark := p.Topic("kv@big@m"), p.Topic("kv@marker@m")
	const batches = 1000 // 80 MB in all
	for range batches {
		big.Publish([]kvevents.Event{ev})
	}
	mark.Publish([]kvevents.Event{{Kind: kvevents.Cleared}})
	recv(t, marker) // the publisher has handled every batch before it
	const bound = 16 << 20
	if held := int64(heapInUse()) - int64(before); held > bound {
		t.Errorf("%d MiB held for a subscriber that does not read; want at most %d MiB", held>>20, bound>>20)
	}
	if p.Dropped() == 0 {
		t.Errorf("nothing dropped for a subscriber that does not read %d batches of 80 KB", batches)
	}
}

// readToEOF reads conn until it is closed.
func readToEOF(t *testing.T, conn net.Conn, why string) {
	t.Helper()
	buf := make([]byte, 512)
	conn.SetReadDeadline(time.Now().Add(patience))
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%s: still connected after %v", why, patience)
			}
			return
		}
	}
}
