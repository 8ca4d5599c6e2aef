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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// queueLen is how many batches wait to be encoded, and how many
	// encoded messages wait for each subscriber. What does not fit is
	// dropped and counted, so that a slow or absent subscriber never
	// holds up a scheduler, as ZeroMQ's PUB drops past its high-water
	// mark.
	queueLen = 1024
	// dialRetry is how long a Publisher that dials waits before dialling
	// again a subscriber that is not there, or has gone.
	dialRetry = time.Second
	// ioTimeout bounds the handshake and each write to a subscriber, and
	// how long Close waits for a subscriber to take what is queued.
	ioTimeout = 10 * time.Second
)

// Publisher is a ZeroMQ PUB socket for event batches. Each message has
// three frames, as llm-d's subscriber reads them: the topic, the batch's
// sequence number in its topic (8 bytes, big endian) and the msgpack
// batch (see appendBatch). A subscriber gets the messages whose topic
// starts with one of its subscriptions. Publish never blocks. The
// Publisher owns its goroutines: one encodes, one dials or accepts, two
// serve each subscriber; Close ends them all.
type Publisher struct {
	log      *slog.Logger
	queue    chan message
	encoded  chan struct{} // closed when the encoder has sent all that was queued
	stopping chan struct{} // closed by Close: no more batches
	closing  chan struct{} // closed once the encoder is done: subscribers flush and go
	cancel   context.CancelFunc
	ln       net.Listener // when bound; nil when dialling
	wg       sync.WaitGroup
	once     sync.Once

	mu    sync.Mutex
	peers map[*peer]struct{}

	published, dropped atomic.Uint64
	joins              atomic.Uint64 // subscribers that completed a handshake, ever
	subscribers        atomic.Int64  // connected now
}

type message struct {
	topic  string
	seq    uint64
	at     time.Time
	events []Event
}

// NewPublisher opens a PUB socket on endpoint, tcp://HOST:PORT. As vLLM
// does, a wildcard host (tcp://*:5557) is bound and subscribers connect;
// any other host is dialled, as llm-d's indexer expects (it binds), and
// dialled again whenever the subscriber goes away. A dial does not hold
// up NewPublisher: as in ZeroMQ, what is published while no subscriber
// is connected is lost.
func NewPublisher(endpoint string, log *slog.Logger) (*Publisher, error) {
	bind, addr, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		log: log, queue: make(chan message, queueLen), encoded: make(chan struct{}),
		stopping: make(chan struct{}), closing: make(chan struct{}), cancel: cancel,
		peers: make(map[*peer]struct{}),
	}
	if bind {
		if p.ln, err = net.Listen("tcp", addr); err != nil {
			cancel()
			return nil, fmt.Errorf("kv events: %w", err)
		}
		p.wg.Add(1)
		go p.accept()
	} else {
		p.wg.Add(1)
		go p.dial(ctx, addr)
	}
	p.wg.Add(1)
	go p.encode()
	return p, nil
}

// ParseEndpoint reads a publisher's endpoint, tcp://HOST:PORT: whether it
// binds (HOST is *) and the address to listen on or dial.
func ParseEndpoint(endpoint string) (bind bool, addr string, err error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return false, "", fmt.Errorf("kv events endpoint %q: want tcp://HOST:PORT (HOST * to bind)", endpoint)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return false, "", fmt.Errorf("kv events endpoint %q: %w", endpoint, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false, "", fmt.Errorf("kv events endpoint %q: port %q", endpoint, port)
	}
	if host == "*" {
		return true, net.JoinHostPort("", port), nil
	}
	if host == "" {
		return false, "", fmt.Errorf("kv events endpoint %q: no host (tcp://*:%s binds)", endpoint, port)
	}
	return false, rest, nil
}

// Addr is the bound address, nil when the Publisher dials.
func (p *Publisher) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Published and Dropped count the batches published, and those a
// subscriber missed because a queue was full.
func (p *Publisher) Published() uint64 { return p.published.Load() }
func (p *Publisher) Dropped() uint64   { return p.dropped.Load() }

// Subscribers is the number of subscribers connected now.
func (p *Publisher) Subscribers() int { return int(p.subscribers.Load()) }

// Close sends subscribers what was published before it (waiting at most
// ioTimeout for each), then closes every connection.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		close(p.stopping)
		<-p.encoded
		close(p.closing)
		p.cancel()
		if p.ln != nil {
			p.ln.Close()
		}
		p.wg.Wait()
	})
	return nil
}

// Topic returns the stream of events published on topic, whose batches
// are numbered from 0. llm-d reads a topic as kv@<pod>@<model>: the pod
// is the address its scheduler routes to, the model the name requests
// give.
func (p *Publisher) Topic(topic string) *Stream { return &Stream{p: p, topic: topic} }

// Stream publishes the batches of one topic.
type Stream struct {
	p     *Publisher
	topic string
	seq   atomic.Uint64
}

// Joins counts the subscribers that have connected to the Publisher so
// far. A publisher whose state a subscriber must know whole (a cache's
// blocks) publishes it again when the count changes: ZeroMQ gives a
// subscriber only what is published after it connects.
func (s *Stream) Joins() uint64 { return s.p.joins.Load() }

// Publish queues events as one batch without waiting; the Stream owns
// the slice from now on. A batch that does not fit the queue, or comes
// after Close, is dropped and its sequence number skipped, so that a
// subscriber can tell.
func (s *Stream) Publish(events []Event) {
	m := message{topic: s.topic, seq: s.seq.Add(1) - 1, at: time.Now(), events: events}
	s.p.published.Add(1)
	select {
	case <-s.p.stopping:
		s.p.dropped.Add(1)
		return
	default:
	}
	select {
	case s.p.queue <- m:
	default:
		s.p.dropped.Add(1)
	}
}

// encode turns queued batches into messages for the subscribers of their
// topics, until Close, and then what is left in the queue.
func (p *Publisher) encode() {
	defer p.wg.Done()
	defer close(p.encoded)
	var payload []byte
	for {
		var m message
		select {
		case m = <-p.queue:
		case <-p.stopping:
			select {
			case m = <-p.queue:
			default:
				return
			}
		}
		payload = appendBatch(payload[:0], m.at, m.events)
		var wire []byte // built once, for the first subscriber
		p.mu.Lock()
		for pr := range p.peers {
			if !pr.subscribed(m.topic) {
				continue
			}
			if wire == nil {
				wire = appendMessage(nil, []byte(m.topic), binary.BigEndian.AppendUint64(nil, m.seq), payload)
			}
			select {
			case pr.out <- wire:
			default:
				p.dropped.Add(1)
			}
		}
		p.mu.Unlock()
	}
}

// dial connects to the subscriber at addr, serves it until it goes, and
// dials again, until Close.
func (p *Publisher) dial(ctx context.Context, addr string) {
	defer p.wg.Done()
	var d net.Dialer
	warned := false
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			p.serve(conn)
		case ctx.Err() != nil:
		case !warned: // once: the subscriber may well start later
			p.log.Warn("kv events: no subscriber yet; dialling again every second", "addr", addr, "err", err)
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
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(conn)
		}()
	}
}

// peer is a connected subscriber.
type peer struct {
	out  chan []byte // whole messages, ready for the wire
	mu   sync.Mutex
	subs map[string]struct{}
}

func (pr *peer) subscribed(topic string) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for s := range pr.subs {
		if strings.HasPrefix(topic, s) {
			return true
		}
	}
	return false
}

// serve handshakes with a subscriber on conn and writes it the messages
// of its subscriptions until it goes or the Publisher closes; a second
// goroutine reads its subscriptions. serve closes conn.
func (p *Publisher) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(ioTimeout))
	if err := handshake(conn, r); err != nil {
		p.log.Warn("kv events: subscriber refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	conn.SetDeadline(time.Time{})
	pr := &peer{out: make(chan []byte, queueLen), subs: make(map[string]struct{})}
	p.mu.Lock()
	p.peers[pr] = struct{}{}
	p.mu.Unlock()
	p.subscribers.Add(1)
	p.joins.Add(1)
	defer func() {
		p.mu.Lock()
		delete(p.peers, pr)
		p.mu.Unlock()
		p.subscribers.Add(-1)
	}()
	p.log.Info("kv events: subscriber connected", "remote", conn.RemoteAddr().String())

	var wmu sync.Mutex // the reader answers PINGs on the same connection
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(ioTimeout))
		_, err := conn.Write(b)
		return err
	}
	gone := make(chan struct{})
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(gone)
		if err := pr.read(r, write); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			p.log.Debug("kv events: subscriber", "remote", conn.RemoteAddr().String(), "err", err)
		}
	}()
	defer reader.Wait()
	defer conn.Close() // ends the reader
	for {
		select {
		case b := <-pr.out:
			if write(b) != nil {
				return
			}
		case <-gone:
			return
		case <-p.closing:
			for {
				select {
				case b := <-pr.out:
					if write(b) != nil {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// handshake exchanges greetings and READY commands with a SUB peer.
func handshake(conn net.Conn, r *bufio.Reader) error {
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
	flags, body, err := readFrame(r)
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

// maxSubscriptions bounds the subscriptions one peer holds.
const maxSubscriptions = 1024

// read takes the peer's subscriptions and cancellations, as commands
// (ZMTP 3.1) or as messages led by 1 or 0 (3.0), and answers PINGs,
// until the connection ends.
func (pr *peer) read(r *bufio.Reader, write func([]byte) error) error {
	for {
		flags, body, err := readFrame(r)
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
				if err := write(appendCommand(nil, "PONG", data[2:])); err != nil {
					return err
				}
				continue
			default:
				continue
			}
		case len(body) > 0 && (body[0] == 0 || body[0] == 1):
			topic, sub = string(body[1:]), body[0] == 1
		default:
			continue // a SUB sends nothing else
		}
		pr.mu.Lock()
		if !sub {
			delete(pr.subs, topic)
		} else if len(pr.subs) < maxSubscriptions {
			pr.subs[topic] = struct{}{}
		}
		pr.mu.Unlock()
	}
}
