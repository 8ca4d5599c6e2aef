// Package kvtest is what tests of a kvevents.Publisher subscribe and read
// with: a raw ZeroMQ SUB client over a plain TCP connection (Sub) and a
// reader of the msgpack batches the publisher sends (Decode). Both are
// written apart from the publisher's own ZMTP and msgpack code, from the
// specifications (ZMTP 3.1, rfc.zeromq.org/spec/37; msgpack), so that each
// checks the other; deploy/picker's TestKVEventsIndex checks the stream
// with llm-d's indexer, libzmq and vmihailenco/msgpack besides.
//
// A Sub is deliberately bare: it reads only when asked, so that a test can
// be the subscriber that never reads, and it lets a test write any bytes.
package kvtest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxFrame bounds a frame the publisher sends a Sub: a batch, or a whole
// restatement of a cache.
const maxFrame = 256 << 20

// Message is one message of the publisher: the topic, the batch's
// sequence number in its topic, the msgpack batch.
type Message struct {
	Topic   string
	Seq     uint64
	Payload []byte
}

// Sub is one raw ZMTP 3.1 SUB connection to a publisher.
type Sub struct {
	conn net.Conn
	r    *bufio.Reader
}

// Dial connects to the publisher at addr (host:port) and completes the
// ZMTP handshake as a SUB socket with the NULL mechanism; timeout bounds
// the dial and the handshake.
func Dial(addr string, timeout time.Duration) (*Sub, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("kvtest: dial %s: %w", addr, err)
	}
	s := &Sub{conn: conn, r: bufio.NewReader(conn)}
	conn.SetDeadline(time.Now().Add(timeout))
	if err := s.handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("kvtest: handshake with %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	return s, nil
}

// Greeting is a ZMTP 3.1 greeting with the NULL mechanism, as a client.
func Greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f // signature: 0xff, 8 bytes of padding, 0x7f
	g[10], g[11] = 3, 1     // version 3.1
	copy(g[12:], "NULL")    // mechanism, 20 bytes null-padded
	return g
}

// Ready is a READY command frame naming the socket type typ.
func Ready(typ string) []byte {
	var body []byte
	body = append(body, 5)
	body = append(body, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(typ)))
	body = append(body, typ...)
	return Frame(0x04, body)
}

// Frame is one ZMTP frame of body with flags (0x01 more, 0x04 command);
// the long size form is chosen for a body over 255 bytes.
func Frame(flags byte, body []byte) []byte {
	var b []byte
	if len(body) > 255 {
		b = append(b, flags|0x02)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	} else {
		b = append(b, flags, byte(len(body)))
	}
	return append(b, body...)
}

// Command is a command frame: name, then data.
func Command(name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	return Frame(0x04, append(body, data...))
}

func (s *Sub) handshake() error {
	if _, err := s.conn.Write(append(Greeting(), Ready("SUB")...)); err != nil {
		return err
	}
	g := make([]byte, 64)
	if _, err := io.ReadFull(s.r, g); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	if g[0] != 0xff || g[9] != 0x7f || g[10] != 3 {
		return fmt.Errorf("greeting % x: not ZMTP 3", g[:12])
	}
	if mech := string(bytes.TrimRight(g[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("mechanism %q", mech)
	}
	flags, body, err := s.frame()
	if err != nil {
		return fmt.Errorf("READY: %w", err)
	}
	if flags&0x04 == 0 || len(body) < 6 || string(body[1:6]) != "READY" {
		return errors.New("the publisher's first frame is not READY")
	}
	return nil
}

// Subscribe sends a SUBSCRIBE command for the messages whose topic starts
// with prefix ("" for all).
func (s *Sub) Subscribe(prefix string) error {
	_, err := s.conn.Write(Command("SUBSCRIBE", []byte(prefix)))
	return err
}

// Cancel sends a CANCEL command for prefix.
func (s *Sub) Cancel(prefix string) error {
	_, err := s.conn.Write(Command("CANCEL", []byte(prefix)))
	return err
}

// Write writes b as it is: frames of a test's own making.
func (s *Sub) Write(b []byte) (int, error) { return s.conn.Write(b) }

// Sync sends a PING and reads until its PONG, returning the messages that
// came before it. The publisher reads a connection's commands in order, so
// once Sync returns it has taken every subscription sent before.
func (s *Sub) Sync() ([]Message, error) {
	ctx := []byte("sync")
	if _, err := s.conn.Write(Command("PING", append([]byte{0, 0}, ctx...))); err != nil {
		return nil, err
	}
	var msgs []Message
	for {
		m, pong, err := s.next()
		if err != nil {
			return msgs, err
		}
		if pong != nil {
			if !bytes.Equal(pong, ctx) {
				return msgs, fmt.Errorf("PONG with context %q", pong)
			}
			return msgs, nil
		}
		msgs = append(msgs, m)
	}
}

// Recv reads the next message, skipping commands.
func (s *Sub) Recv() (Message, error) {
	for {
		m, pong, err := s.next()
		if err != nil || pong == nil {
			return m, err
		}
	}
}

// SetReadDeadline bounds the reads of Recv and Sync.
func (s *Sub) SetReadDeadline(t time.Time) error { return s.conn.SetReadDeadline(t) }

// Close closes the connection.
func (s *Sub) Close() error { return s.conn.Close() }

// next reads a message, or a PONG command (its context in pong).
func (s *Sub) next() (m Message, pong []byte, err error) {
	var parts [][]byte
	for {
		flags, body, err := s.frame()
		if err != nil {
			return m, nil, err
		}
		if flags&0x04 != 0 {
			if len(parts) > 0 {
				return m, nil, errors.New("a command inside a message")
			}
			if len(body) >= 5 && string(body[:5]) == "\x04PONG" {
				return m, body[5:], nil
			}
			continue // PING, or another command a SUB may ignore
		}
		parts = append(parts, body)
		if flags&0x01 == 0 {
			break
		}
	}
	if len(parts) != 3 || len(parts[1]) != 8 {
		return m, nil, fmt.Errorf("a message of %d parts; want topic, 8-byte sequence number, payload", len(parts))
	}
	return Message{Topic: string(parts[0]), Seq: binary.BigEndian.Uint64(parts[1]), Payload: parts[2]}, nil, nil
}

func (s *Sub) frame() (flags byte, body []byte, err error) {
	if flags, err = s.r.ReadByte(); err != nil {
		return 0, nil, err
	}
	var n uint64
	if flags&0x02 != 0 {
		var b [8]byte
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	} else {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n = uint64(c)
	}
	if n > maxFrame {
		return 0, nil, fmt.Errorf("a %d-byte frame", n)
	}
	body = make([]byte, n)
	_, err = io.ReadFull(s.r, body)
	return flags, body, err
}
