package kvevents

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// inputBatches and inputBytes bound the batches that wait to be
	// encoded: what does not fit is dropped and counted, so that a
	// scheduler never waits, and the stream that lost it asks its engine
	// for the whole state again (Stream.Resync).
	inputBatches = 1024
	inputBytes   = 64 << 20
	// dialRetry is how long a Publisher that connects waits before
	// connecting again to a subscriber that is not there, or has gone.
	dialRetry = time.Second
	// subscriptionOverhead is what each subscription counts toward
	// Options.MaxSubscriptionBytes besides its prefix: the cost of
	// holding it.
	subscriptionOverhead = 64
	// writeChunk is how much of a message is written under one write
	// deadline: a subscriber is cut when it takes no bytes for
	// Options.WriteTimeout, not when a large message takes longer.
	writeChunk = 64 << 10
	// refusalWarnEvery spaces the warnings about connections refused
	// past Options.MaxPeers.
	refusalWarnEvery = time.Minute
)

// Publisher is a ZeroMQ PUB socket for event batches. Each message has
// three frames, as llm-d's subscriber reads them: the topic, the batch's
// sequence number in its topic (8 bytes, big endian) and the msgpack
// batch (see appendBatch). A subscriber gets the messages whose topic
// starts with one of its subscriptions.
//
// ZeroMQ gives a subscriber only what is published after it subscribes,
// and a cache's events describe changes, so the Publisher keeps each
// topic's state (what its batches say is held) and restates it to a
// subscriber that joins: one message, numbered as the last batch it
// covers, to that subscriber only, at most once per
// Options.RestateInterval per topic (joiners within an interval wait for
// the next one, and share it). Publishing and restating both happen off
// the publisher's callers: Publish never blocks.
//
// What a subscriber can make it hold is bounded (Options): connections,
// subscriptions, queued bytes, and the time it may spend in its
// handshake, without a subscription, or taking no bytes.
//
// The Publisher owns its goroutines: one encodes and restates, one
// accepts or connects, two serve each subscriber; Close ends them all.
type Publisher struct {
	opt      Options
	log      *slog.Logger
	maxFrame int
	ln       net.Listener // when bound; nil when connecting
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once

	input     chan message
	inputSize atomic.Int64
	changed   chan struct{} // cap 1: a subscriber's subscriptions changed, or it left
	stopping  chan struct{} // closed by Close: no more batches
	encoded   chan struct{} // closed once the encoder is done
	closing   chan struct{} // closed after encoded: subscribers flush and go

	mu        sync.Mutex
	streams   map[string]*Stream
	peers     map[*peer]struct{}    // handshake done
	shaking   map[net.Conn]struct{} // in their handshake
	dirty     map[*peer]struct{}    // subscriptions changed since the encoder looked
	closed    bool
	lastRefus time.Time

	// Owned by the encoder: subscribers that may wait for a restatement.
	needy map[*peer]struct{}

	published, dropped, refused, restates atomic.Uint64
	subscribers                           atomic.Int64
}

// message is a batch of one stream, queued to be encoded.
type message struct {
	stream *Stream
	seq    uint64
	at     time.Time
	events []Event
	size   int64 // about its memory, for inputBytes
}

// NewPublisher opens a PUB socket at ep: it binds, or connects to a
// subscriber that binds (llm-d's indexer), again whenever that subscriber
// goes away. A connection does not hold up NewPublisher. A Publisher that
// binds an address other hosts can reach says so in its log: the stream
// is plaintext (ZMTP's NULL security), readable by anyone who reaches
// the port.
func NewPublisher(ep Endpoint, opt Options) (*Publisher, error) {
	opt = opt.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		opt: opt, log: opt.Log, maxFrame: opt.MaxSubscriptionBytes + 512, cancel: cancel,
		input: make(chan message, inputBatches), changed: make(chan struct{}, 1),
		stopping: make(chan struct{}), encoded: make(chan struct{}), closing: make(chan struct{}),
		streams: make(map[string]*Stream), peers: make(map[*peer]struct{}),
		shaking: make(map[net.Conn]struct{}), dirty: make(map[*peer]struct{}), needy: make(map[*peer]struct{}),
	}
	if ep.Bind {
		ln, err := net.Listen("tcp", ep.Addr())
		if err != nil {
			cancel()
			return nil, fmt.Errorf("kv events: bind %s: %w", ep.Addr(), err)
		}
		p.ln = ln
		if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			tokens := "their token ids, "
			if opt.OmitTokens {
				tokens = ""
			}
			p.log.Warn("kv events: bound an address other hosts can reach; the stream is plaintext (ZMTP NULL security, no CURVE) and tells anyone who connects the hashes, "+tokens+"and timing of every cached prompt prefix: keep the port on a trusted network",
				"addr", ln.Addr().String())
		}
		p.wg.Add(1)
		go p.accept()
	} else {
		p.wg.Add(1)
		go p.dial(ctx, ep.Addr())
	}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

// Addr is the bound address, nil when the Publisher connects.
func (p *Publisher) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Published counts the batches published.
func (p *Publisher) Published() uint64 { return p.published.Load() }

// Dropped counts the batches lost: dropped before they were encoded,
// or for a subscriber whose queue was full.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Refused counts the connections closed at once because the Publisher
// held Options.MaxPeers.
func (p *Publisher) Refused() uint64 { return p.refused.Load() }

// Restates counts the restatements built (each sent to every subscriber
// that waited for it).
func (p *Publisher) Restates() uint64 { return p.restates.Load() }

// Subscribers is the number of subscribers connected now.
func (p *Publisher) Subscribers() int { return int(p.subscribers.Load()) }

// Close sends subscribers what was published before it (waiting at most
// Options.WriteTimeout for each to take bytes), then closes every
// connection and waits for every goroutine to end.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		close(p.stopping)
		<-p.encoded
		close(p.closing)
		p.cancel()
		if p.ln != nil {
			p.ln.Close()
		}
		p.mu.Lock()
		p.closed = true
		for c := range p.shaking {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return nil
}

// Topic returns the stream of events published on topic, whose batches
// are numbered from 0; the same topic, the same stream. llm-d reads a
// topic as kv@<pod>@<model>: the pod is the address its scheduler
// routes to, the model the name requests give.
func (p *Publisher) Topic(topic string) *Stream {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.streams[topic]
	if !ok {
		s = &Stream{p: p, topic: topic, state: newState()}
		p.streams[topic] = s
	}
	return s
}

// Stream publishes the batches of one topic.
type Stream struct {
	p     *Publisher
	topic string
	seq   atomic.Uint64
	lost  atomic.Bool

	// Owned by the encoder.
	state    *state    // what the batches sent say is held
	sent     bool      // a batch was sent: last is its number
	last     uint64    // the last batch's number
	restated time.Time // when last restated; zero: never
}

// Publish queues events as one batch without waiting; the Stream owns
// the slice from now on. A batch that does not fit the queue, or comes
// after Close, is dropped and its sequence number skipped, so that a
// subscriber can tell; the Stream then wants the whole state (Resync).
func (s *Stream) Publish(events []Event) {
	m := message{stream: s, seq: s.seq.Add(1) - 1, at: time.Now(), events: events, size: eventsSize(events)}
	s.p.published.Add(1)
	select {
	case <-s.p.stopping:
		s.p.dropped.Add(1)
		return
	default:
	}
	if s.p.inputSize.Add(m.size) > inputBytes {
		s.drop(m)
		return
	}
	select {
	case s.p.input <- m:
	default:
		s.drop(m)
	}
}

func (s *Stream) drop(m message) {
	s.p.inputSize.Add(-m.size)
	s.p.dropped.Add(1)
	s.lost.Store(true)
}

// Resync reports, once, that a batch of the stream was dropped before it
// was encoded: what the Publisher holds of the topic's state is wrong,
// and its publisher must publish AllBlocksCleared and then every block it
// holds, which rebuilds it.
func (s *Stream) Resync() bool { return s.lost.Swap(false) }

// eventsSize is about the memory of events.
func eventsSize(events []Event) int64 {
	n := int64(0)
	for _, e := range events {
		n += 64 + int64(len(e.Hashes))*int64(len(Hash{})) + 4*int64(len(e.Tokens))
	}
	return n
}

// run encodes the queued batches, sends them to the subscribers of their
// topics, and restates topics to the subscribers that joined them, until
// Close, and then encodes what is left in the queue.
func (p *Publisher) run() {
	defer p.wg.Done()
	defer close(p.encoded)
	var payload []byte
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case m := <-p.input:
			payload = p.send(m, payload)
			continue
		case <-p.changed:
		case <-timer.C:
		case <-p.stopping:
			for {
				select {
				case m := <-p.input:
					payload = p.send(m, payload)
				default:
					return
				}
			}
		}
		if wait := p.restate(time.Now()); wait > 0 {
			timer.Reset(wait)
		}
	}
}

// send encodes m and queues it for the subscribers of its topic.
func (p *Publisher) send(m message, payload []byte) []byte {
	p.inputSize.Add(-m.size)
	s := m.stream
	s.state.apply(m.events)
	s.sent, s.last = true, m.seq
	payload = appendBatch(payload[:0], m.at, m.events, p.opt.OmitTokens)
	var wire []byte // built once, for the first subscriber
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.peers {
		if !pr.subscribed(s.topic) {
			continue
		}
		if wire == nil {
			wire = appendMessage(nil, []byte(s.topic), binary.BigEndian.AppendUint64(nil, m.seq), payload)
		}
		if !pr.enqueue(wire, p.opt.MaxQueueBytes) {
			p.dropped.Add(1)
		}
	}
	return payload
}

// restate sends the restatements due: each topic that a subscriber
// subscribed to since it last got one (or since it joined) is restated
// to it, unless the topic was restated less than RestateInterval ago.
// It returns how long until the next one is due; 0: none waits.
func (p *Publisher) restate(now time.Time) time.Duration {
	p.mu.Lock()
	for pr := range p.dirty {
		p.needy[pr] = struct{}{}
	}
	clear(p.dirty)
	streams := make([]*Stream, 0, len(p.streams))
	for _, s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()

	want := map[*Stream][]*peer{}
	for pr := range p.needy {
		if pr.left.Load() {
			delete(p.needy, pr)
			continue
		}
		waits := false
		for _, s := range streams {
			switch {
			case !pr.subscribed(s.topic):
				delete(pr.told, s) // to be told again if it subscribes again
			case pr.told[s]:
			case !s.sent: // it will get every batch, from the first
				pr.told[s] = true
			default:
				want[s] = append(want[s], pr)
				waits = true
			}
		}
		if !waits {
			delete(p.needy, pr)
		}
	}
	var wait time.Duration
	for s, prs := range want {
		if next := s.restated.Add(p.opt.RestateInterval); !s.restated.IsZero() && now.Before(next) {
			if d := next.Sub(now); wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		var wire []byte
		if events := s.state.events(p.opt.OmitTokens); len(events) > 0 {
			wire = appendMessage(nil, []byte(s.topic), binary.BigEndian.AppendUint64(nil, s.last), appendBatch(nil, now, events, p.opt.OmitTokens))
			s.restated = now
			p.restates.Add(1)
		}
		for _, pr := range prs {
			pr.told[s] = true
			if wire != nil && !pr.enqueue(wire, p.opt.MaxQueueBytes) {
				p.dropped.Add(1)
			}
		}
	}
	return wait
}

// changedSubscriptions tells the encoder that pr's subscriptions changed,
// or that it left.
func (p *Publisher) changedSubscriptions(pr *peer) {
	p.mu.Lock()
	p.dirty[pr] = struct{}{}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// dial connects to the subscriber at addr, serves it until it goes, and
// connects again, until Close.
func (p *Publisher) dial(ctx context.Context, addr string) {
	defer p.wg.Done()
	var d net.Dialer
	warned := false
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			if p.admit(conn) {
				p.serve(conn)
			}
		case ctx.Err() != nil:
		case !warned: // once: the subscriber may well start later
			p.log.Warn("kv events: no subscriber yet; connecting again every second", "addr", addr, "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(dialRetry):
		}
	}
}

// accept serves each subscriber that connects, until Close.
func (p *Publisher) accept() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.admit(conn) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(conn)
		}()
	}
}

// admit counts conn in, as a connection in its handshake, or closes it
// when the Publisher holds MaxPeers or is closing.
func (p *Publisher) admit(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		conn.Close()
		return false
	}
	if len(p.shaking)+len(p.peers) >= p.opt.MaxPeers {
		conn.Close()
		p.refused.Add(1)
		if now := time.Now(); now.Sub(p.lastRefus) >= refusalWarnEvery {
			p.lastRefus = now
			p.log.Warn("kv events: refused a connection: too many subscribers", "remote", conn.RemoteAddr().String(), "max", p.opt.MaxPeers)
		}
		return false
	}
	p.shaking[conn] = struct{}{}
	return true
}

// serve handshakes with a subscriber on conn and writes it the messages
// of its subscriptions until it goes, fails to take bytes, or the
// Publisher closes; a second goroutine reads its subscriptions. serve
// closes conn.
func (p *Publisher) serve(conn net.Conn) {
	defer conn.Close()
	remote := conn.RemoteAddr().String()
	r := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(p.opt.HandshakeTimeout))
	err := handshake(conn, r, p.maxFrame)
	pr := &peer{wake: make(chan struct{}, 1), subs: make(map[string]struct{}), told: make(map[*Stream]bool)}
	p.mu.Lock()
	delete(p.shaking, conn)
	if err == nil && p.closed {
		err = net.ErrClosed
	}
	if err == nil {
		p.peers[pr] = struct{}{}
		p.subscribers.Add(1)
	}
	p.mu.Unlock()
	if err != nil {
		p.log.Debug("kv events: subscriber refused", "remote", remote, "err", err)
		return
	}
	defer p.leave(pr)
	p.log.Debug("kv events: subscriber connected", "remote", remote)
	conn.SetDeadline(time.Time{})

	gone := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		defer close(gone)
		err := p.read(pr, conn, r)
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			p.log.Debug("kv events: subscriber cut", "remote", remote, "err", err)
		}
	})
	defer reader.Wait()
	defer conn.Close() // ends the reader
	for {
		select {
		case <-pr.wake:
			if p.flush(pr, conn) != nil {
				return
			}
		case <-gone:
			return
		case <-p.closing:
			p.flush(pr, conn)
			return
		}
	}
}

// leave takes pr out of the subscribers.
func (p *Publisher) leave(pr *peer) {
	pr.left.Store(true)
	p.mu.Lock()
	delete(p.peers, pr)
	p.subscribers.Add(-1)
	p.mu.Unlock()
	pr.qmu.Lock()
	pr.queue, pr.queued = nil, 0
	pr.qmu.Unlock()
	p.changedSubscriptions(pr) // the encoder forgets it
}

// flush writes what is queued for pr until its queue is empty.
func (p *Publisher) flush(pr *peer, conn net.Conn) error {
	for {
		pr.qmu.Lock()
		msgs := pr.queue
		pr.queue = nil
		pr.qmu.Unlock()
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			for b := m; len(b) > 0; {
				n := min(len(b), writeChunk)
				conn.SetWriteDeadline(time.Now().Add(p.opt.WriteTimeout))
				if _, err := conn.Write(b[:n]); err != nil {
					return fmt.Errorf("kv events: write: %w", err)
				}
				b = b[n:]
			}
			pr.qmu.Lock()
			pr.queued -= len(m)
			pr.qmu.Unlock()
		}
	}
}

// peer is a subscriber.
type peer struct {
	left atomic.Bool // it has gone

	qmu    sync.Mutex
	queue  [][]byte // whole messages, ready for the wire
	queued int      // bytes in queue, and of the messages being written
	wake   chan struct{}

	smu      sync.Mutex
	subs     map[string]struct{}
	subBytes int

	told map[*Stream]bool // owned by the encoder: the topics restated to it
}

// enqueue queues msg unless it would take the queue past max bytes, a
// queue that is not empty.
func (pr *peer) enqueue(msg []byte, max int) bool {
	pr.qmu.Lock()
	if pr.queued > 0 && pr.queued+len(msg) > max || pr.left.Load() {
		pr.qmu.Unlock()
		return false
	}
	pr.queue = append(pr.queue, msg)
	pr.queued += len(msg)
	pr.qmu.Unlock()
	select {
	case pr.wake <- struct{}{}:
	default:
	}
	return true
}

func (pr *peer) subscribed(topic string) bool {
	pr.smu.Lock()
	defer pr.smu.Unlock()
	for s := range pr.subs {
		if len(topic) >= len(s) && topic[:len(s)] == s {
			return true
		}
	}
	return false
}

// errSubscriptions cuts a subscriber past Options.MaxSubscriptionBytes.
var errSubscriptions = errors.New("kv events: subscriptions past the bound")

// read takes the subscriber's subscriptions and cancellations, as
// commands (ZMTP 3.1) or as messages led by 1 or 0 (3.0), and answers
// PINGs, until the connection ends, or the subscriber sends no
// subscription within SubscribeTimeout of its handshake, or too many.
func (p *Publisher) read(pr *peer, conn net.Conn, r *bufio.Reader) error {
	conn.SetReadDeadline(time.Now().Add(p.opt.SubscribeTimeout))
	waiting := true // for the first subscription
	for {
		flags, body, err := readFrame(r, p.maxFrame)
		if err != nil {
			return err
		}
		var topic string
		var sub bool
		switch {
		case flags&flagCommand != 0:
			name, data, err := command(body)
			if err != nil {
				return err
			}
			switch name {
			case "SUBSCRIBE":
				topic, sub = string(data), true
			case "CANCEL":
				topic = string(data)
			case "PING":
				if len(data) < 2 {
					return errors.New("zmtp: malformed PING")
				}
				pr.enqueue(appendCommand(nil, "PONG", data[2:]), p.opt.MaxQueueBytes)
				continue
			default:
				continue
			}
		case len(body) > 0 && (body[0] == 0 || body[0] == 1):
			topic, sub = string(body[1:]), body[0] == 1
		default:
			continue // a SUB sends nothing else
		}
		pr.smu.Lock()
		_, had := pr.subs[topic]
		switch {
		case sub && !had && pr.subBytes+len(topic)+subscriptionOverhead > p.opt.MaxSubscriptionBytes:
			pr.smu.Unlock()
			return errSubscriptions
		case sub && !had:
			pr.subs[topic] = struct{}{}
			pr.subBytes += len(topic) + subscriptionOverhead
		case !sub && had:
			delete(pr.subs, topic)
			pr.subBytes -= len(topic) + subscriptionOverhead
		}
		pr.smu.Unlock()
		if sub && waiting {
			conn.SetReadDeadline(time.Time{})
			waiting = false
		}
		p.changedSubscriptions(pr)
	}
}

// handshake exchanges greetings and READY commands with a SUB peer,
// reading frames of at most maxFrame bytes.
func handshake(conn net.Conn, r *bufio.Reader, maxFrame int) error {
	if _, err := conn.Write(append(greeting(), ready()...)); err != nil {
		return err
	}
	g := make([]byte, greetingLen)
	if _, err := io.ReadFull(r, g); err != nil {
		return fmt.Errorf("zmtp greeting: %w", err)
	}
	if err := checkGreeting(g); err != nil {
		return err
	}
	flags, body, err := readFrame(r, maxFrame)
	if err != nil {
		return fmt.Errorf("zmtp handshake: %w", err)
	}
	name, data, err := command(body)
	if err != nil || flags&flagCommand == 0 || name != "READY" {
		return errors.New("zmtp: the peer's first frame is not READY")
	}
	typ, err := peerSocketType(data)
	if err != nil {
		return err
	}
	if typ != "SUB" && typ != "XSUB" {
		return fmt.Errorf("zmtp: a %s socket cannot subscribe", typ)
	}
	return nil
}
