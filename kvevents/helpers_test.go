package kvevents_test

import (
	"bytes"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/kvevents/kvtest"
)

// patience bounds every wait of these tests: a deadline to fail by, never
// a way to synchronize.
const patience = time.Minute

// bindLoopback starts a publisher bound to a free loopback port, closed
// when the test ends, and returns it with its address.
func bindLoopback(t testing.TB, opt kvevents.Options) (*kvevents.Publisher, string) {
	t.Helper()
	p, err := kvevents.NewPublisher(kvevents.Endpoint{Bind: true, Host: "127.0.0.1"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, p.Addr().String()
}

// dial connects a raw SUB to addr, closed when the test ends.
func dial(t testing.TB, addr string) *kvtest.Sub {
	t.Helper()
	s, err := kvtest.Dial(addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// subscribe subscribes s to prefix and waits until the publisher has the
// subscription; it returns the messages that arrived meanwhile.
func subscribe(t testing.TB, s *kvtest.Sub, prefix string) []kvtest.Message {
	t.Helper()
	if err := s.Subscribe(prefix); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(patience))
	defer s.SetReadDeadline(time.Time{})
	msgs, err := s.Sync()
	if err != nil {
		t.Fatalf("subscribe %q: %v", prefix, err)
	}
	return msgs
}

// recv reads s's next message.
func recv(t testing.TB, s *kvtest.Sub) kvtest.Message {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(patience))
	defer s.SetReadDeadline(time.Time{})
	m, err := s.Recv()
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// decode decodes m's batch.
func decode(t testing.TB, m kvtest.Message) kvtest.Batch {
	t.Helper()
	b, err := kvtest.Decode(m.Payload)
	if err != nil {
		t.Fatalf("message %d of %q: %v", m.Seq, m.Topic, err)
	}
	return b
}

// cut reads s until the publisher closes the connection, and fails t if
// it has not within patience.
func cut(t testing.TB, s *kvtest.Sub, why string) {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(patience))
	for {
		_, err := s.Recv()
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: still connected after %v", why, patience)
		}
		return
	}
}

// waitFor polls ok until it reports true, failing t after patience.
func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, patience)
		}
		<-tick.C
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// hash is a distinct block hash.
func hash(i int) kvevents.Hash {
	var h kvevents.Hash
	h[0], h[1], h[31] = byte(i>>8), byte(i), 0xaa
	return h
}

// tokens is a block's worth of token ids from first on.
func tokens(n, first int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(first + i)
	}
	return out
}

// logBuffer is a slog handler's output that tests read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
