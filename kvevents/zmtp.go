package kvevents

// The ZeroMQ wire protocol, ZMTP 3.1 (rfc.zeromq.org/spec/37), as much of
// it as a PUB socket with the NULL security mechanism speaks: the
// greeting, the READY handshake, the subscriptions a SUB peer sends
// (SUBSCRIBE and CANCEL commands, or ZMTP 3.0's subscription messages
// from an older peer), PING, and multipart messages out. The Go ZeroMQ
// module (go-zeromq/zmq4 v0.17.0) was the alternative; its PUB socket
// leaves its writer goroutine running after Close and cannot send what
// is queued before it closes, both of which matter here.
//
// NULL is the only mechanism: the stream is plaintext and anyone who
// reaches the port may subscribe. ZMTP's CURVE (rfc.zeromq.org/spec/25)
// would encrypt it and authenticate subscribers, but no maintained Go
// implementation fits (go-zeromq/zmq4 has none: its issue #26 is open
// since 2018, and a port of one, PR #160, unmerged; the Go ones that
// exist are GPL or one-person forks), and llm-d's indexer, the stream's
// reader, subscribes through libzmq with no security options to set. A
// Publisher is bound to loopback or a trusted network instead (docs/operations.md).

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	greetingLen = 64
)

// greeting is the PUB side's ZMTP greeting: the signature, version 3.1,
// the NULL mechanism, not as server (NULL ignores it), the filler.
func greeting() []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 1
	copy(g[12:32], "NULL")
	return g
}

// checkGreeting checks a peer's greeting: ZMTP 3.x with the NULL
// mechanism.
func checkGreeting(g []byte) error {
	if g[0] != 0xff || g[9] != 0x7f {
		return errors.New("zmtp: not a ZeroMQ peer")
	}
	if g[10] < 3 {
		return fmt.Errorf("zmtp: peer speaks ZMTP %d.%d; want 3.0 or later", g[10], g[11])
	}
	if mech := string(bytes.TrimRight(g[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("zmtp: peer wants the %q mechanism; only NULL is spoken", mech)
	}
	return nil
}

// appendFrame appends one frame of body with flags (flagMore,
// flagCommand), its size in the short or long form.
func appendFrame(b []byte, flags byte, body []byte) []byte {
	if len(body) <= 0xff {
		b = append(b, flags, byte(len(body)))
	} else {
		b = append(b, flags|flagLong)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	}
	return append(b, body...)
}

// appendCommand appends a command frame: the name, then data.
func appendCommand(b []byte, name string, data []byte) []byte {
	body := make([]byte, 0, 1+len(name)+len(data))
	body = append(append(append(body, byte(len(name))), name...), data...)
	return appendFrame(b, flagCommand, body)
}

// ready is the PUB side's READY command.
func ready() []byte {
	const prop, val = "Socket-Type", "PUB"
	data := append([]byte{byte(len(prop))}, prop...)
	data = binary.BigEndian.AppendUint32(data, uint32(len(val)))
	return appendCommand(nil, "READY", append(data, val...))
}

// appendMessage appends a multipart message of parts.
func appendMessage(b []byte, parts ...[]byte) []byte {
	for i, p := range parts {
		var flags byte
		if i < len(parts)-1 {
			flags = flagMore
		}
		b = appendFrame(b, flags, p)
	}
	return b
}

// readFrame reads one frame of at most maxFrame bytes of body: what a
// SUB peer sends (a subscription, a command) is small, and a larger frame
// is refused before it is read.
func readFrame(r *bufio.Reader, maxFrame int) (flags byte, body []byte, err error) {
	if flags, err = r.ReadByte(); err != nil {
		return 0, nil, err
	}
	var n uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	} else {
		c, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n = uint64(c)
	}
	if n > uint64(maxFrame) {
		return 0, nil, fmt.Errorf("zmtp: a %d-byte frame from a SUB peer", n)
	}
	body = make([]byte, n)
	_, err = io.ReadFull(r, body)
	return flags, body, err
}

// command splits a command frame's body into its name and data.
func command(body []byte) (name string, data []byte, err error) {
	if len(body) < 1 || len(body) < 1+int(body[0]) {
		return "", nil, errors.New("zmtp: malformed command")
	}
	return string(body[1 : 1+body[0]]), body[1+body[0]:], nil
}

// peerSocketType reads the Socket-Type property of a READY command's
// data.
func peerSocketType(data []byte) (string, error) {
	for len(data) > 0 {
		n := int(data[0])
		if len(data) < 1+n+4 {
			return "", errors.New("zmtp: malformed READY")
		}
		name := string(data[1 : 1+n])
		data = data[1+n:]
		m := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(len(data)) < uint64(m) {
			return "", errors.New("zmtp: malformed READY")
		}
		if strings.EqualFold(name, "Socket-Type") { // names are case-insensitive
			return string(data[:m]), nil
		}
		data = data[m:]
	}
	return "", errors.New("zmtp: READY without Socket-Type")
}
