package voice

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Generator starts paced chat answers and transcribes what the user
// said (the server's is openai.Pacer on its serving.Core).
type Generator interface {
	// PacedChat starts an answer: body is a chat completion request
	// whose messages follow history, the conversation so far.
	PacedChat(ctx context.Context, body []byte, history []chat.Message, conv *serving.Conversation) (s *engine.Stream, release func(), e *serving.Error)
	// Transcribe returns the text of body's input_audio (see
	// InputAudio) on the model body names (body is a response.create),
	// decoding the sound within the server's media limits before it
	// takes a slot.
	Transcribe(ctx context.Context, body []byte) (string, *serving.Error)
}

// MaxMessage bounds one client message (a turn with its messages).
const MaxMessage = 4 << 20

// Defaults for zero Options fields.
const (
	DefaultWriteTimeout = 30 * time.Second
	DefaultPingInterval = 20 * time.Second
)

// Options configure Serve.
type Options struct {
	// Logger receives a line per session; nil means slog.Default().
	Logger *slog.Logger
	// WriteTimeout bounds each message written: a client that stops
	// reading ends its session (and so its answer). Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PingInterval is how often the server pings the client, so that a
	// proxy's idle timeout does not cut a long pause and a client that
	// vanished (no pong within the interval) ends its session, and so its
	// answer, before the pause times out. Default DefaultPingInterval.
	PingInterval time.Duration
	// MaxHistoryBytes bounds the conversation a socket keeps, in bytes: a
	// message counts its role, content (as JSON), name, tool call id and
	// tool calls' strings, and MessageOverhead. MaxMessages bounds its
	// messages. A turn that would pass either forgets the oldest messages
	// first (system messages stay); one that cannot fit even so is
	// refused. Defaults: serving.DefaultLimits' MaxVoiceHistory and
	// MaxMessages.
	MaxHistoryBytes int
	MaxMessages     int
}

// Serve upgrades the request to a WebSocket and runs one conversation on
// it until the client closes it or ctx (the request's) ends.
//
// A browser page may open one only from an origin the gate allows
// (gate.OriginAllowed: the server's own, when its host is allowed, or one
// of --cors-origins); others get 403.
func Serve(w http.ResponseWriter, r *http.Request, g Generator, opt Options) {
	if !gate.OriginAllowed(r) {
		http.Error(w, fmt.Sprintf("origin %q may not open a voice socket (the operator can allow it with --cors-origins)", r.Header.Get("Origin")), http.StatusForbidden)
		return
	}
	// The origin is checked above, against the gate's policy rather than
	// the library's same-host rule.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered the request
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	conn.SetReadLimit(MaxMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s := &session{conn: conn, g: g, log: log, msgs: make(chan []byte), writeTimeout: opt.WriteTimeout,
		maxBytes:    cmp.Or(max(opt.MaxHistoryBytes, 0), serving.DefaultLimits.MaxVoiceHistory),
		maxMessages: cmp.Or(max(opt.MaxMessages, 0), serving.DefaultLimits.MaxMessages)}
	if s.writeTimeout <= 0 {
		s.writeTimeout = DefaultWriteTimeout
	}
	// sock ends with the socket: a transcription stops when the client
	// goes (an answer, once started, is interrupted instead; see turn).
	sock, gone := context.WithCancel(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer gone()
		s.read(ctx)
	}()
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		ping(ctx, conn, cmp.Or(opt.PingInterval, DefaultPingInterval))
	}()
	err = s.run(ctx, sock)
	switch {
	case err == nil, errors.Is(err, errClosed):
		conn.Close(websocket.StatusNormalClosure, "")
	default:
		log.Debug("voice session ended", "err", err)
		conn.CloseNow()
	}
	cancel()
	<-read
	<-pinged
}

// ping pings the client every interval until ctx ends; a ping without a
// pong within the interval closes the connection, which the session sees
// as a closed socket.
func ping(ctx context.Context, conn *websocket.Conn, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := conn.Ping(pctx)
		cancel()
		if err != nil {
			conn.CloseNow()
			return
		}
	}
}

// errClosed means the client closed the socket (or it broke).
var errClosed = errors.New("voice: socket closed")

// session is one socket's conversation. Its goroutine (run) owns the
// conversation; read forwards client messages to it.
type session struct {
	conn *websocket.Conn
	g    Generator
	log  *slog.Logger
	msgs chan []byte // client messages; closed when the socket is
	// history is the conversation's messages, as much of them as
	// rendering needs (unknown fields dropped, content as text); bytes
	// is their historySize.
	history []chat.Message
	bytes   int
	conv    serving.Conversation

	maxBytes, maxMessages int
	writeTimeout          time.Duration
}

// read forwards client messages until the socket closes or ctx ends.
func (s *session) read(ctx context.Context) {
	defer close(s.msgs)
	for {
		typ, b, err := s.conn.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			b = nil // answered with an error by the session
		}
		select {
		case s.msgs <- b:
		case <-ctx.Done():
			return
		}
	}
}

// run serves turns until the socket closes; sock ends when it does.
func (s *session) run(ctx, sock context.Context) error {
	for {
		b, ok := <-s.msgs
		if !ok {
			return errClosed
		}
		ev, bad := decodeClient(b)
		var err error
		switch {
		case bad != nil:
			err = s.send(ctx, errorEvent(bad))
		case ev.Type == TypeCreate:
			err = s.turn(ctx, sock, b)
		case ev.Type == TypeContinue || ev.Type == TypeInterrupt:
			err = s.send(ctx, errorEvent(invalid("type", "%q outside an answer: send response.create first", ev.Type)))
		default:
			err = s.send(ctx, errorEvent(invalid("type", "unknown message type %q", ev.Type)))
		}
		if err != nil {
			return err
		}
	}
}

// turn runs one response.create: its input_audio, if any, is
// transcribed into a user message (on sock, which ends with the socket),
// the answer is generated paced, each chunk sent after the client
// continued the one before, and what the listener heard joins the
// conversation.
//
// A conversation that outgrew the context forgets its oldest messages
// (system messages stay) until the turn fits: one, then twice as many at
// each try, so that a turn takes a number of tries logarithmic in the
// conversation.
func (s *session) turn(ctx, sock context.Context, b []byte) error {
	var (
		stream  *engine.Stream
		release func()
	)
	msgs, reset, audio, e := s.request(b)
	if e != nil {
		return s.send(ctx, errorEvent(e))
	}
	if audio {
		text, e := s.g.Transcribe(sock, b)
		if e != nil {
			return s.send(ctx, errorEvent(e))
		}
		m := chat.Message{Role: "user", Content: jsonText(text)}
		msgs = append(msgs, m)
		b = withMessage(b, m)
		if err := s.send(ctx, ServerEvent{Type: TypeTranscript, Text: text}); err != nil {
			return err
		}
	}
	if e := s.admit(msgs, reset); e != nil {
		return s.send(ctx, errorEvent(e))
	}
	for forget := 1; ; forget *= 2 {
		stream, release, e = s.g.PacedChat(ctx, b, s.history, &s.conv)
		if e == nil {
			break
		}
		tooLong := e.Code == "context_length_exceeded" || e.Code == "limit_exceeded" && e.Param == "messages"
		if !tooLong || !s.forgetOldest(forget) {
			return s.send(ctx, errorEvent(e))
		}
	}
	defer release() // after the stream ends (defers run last first)
	defer stream.Cancel()
	id := fmt.Sprintf("resp-%d", stream.ID())
	if err := s.send(ctx, ServerEvent{Type: TypeCreated, ID: id}); err != nil {
		return err
	}

	// Chunks come from the engine through pump; the session sends one,
	// waits for the client's continue, then the next.
	chunks := make(chan engine.Chunk)
	pumped := make(chan struct{})
	go pump(ctx, stream, chunks, pumped)
	defer func() {
		stream.Cancel()
		for range chunks { // let pump see the end
		}
		<-pumped
	}()

	in := chunks // nil once the engine delivered everything
	var (
		queue    []engine.Chunk
		waiting  *engine.Chunk // sent, not yet continued
		text     strings.Builder
		heard    int // characters of the chunks the client continued
		spoken   = -1
		finished bool // the engine delivered everything
		closed   error
	)
	for closed == nil && spoken < 0 && !(finished && waiting == nil && len(queue) == 0) {
		if waiting == nil && len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			ev := ServerEvent{Type: TypeChunk, ID: id, Index: &c.Index, Text: c.Text, Last: c.Last}
			if err := s.send(ctx, ev); err != nil {
				return err
			}
			text.WriteString(c.Text)
			waiting = &c
			continue
		}
		select {
		case c, ok := <-in:
			if !ok {
				finished, in = true, nil
				continue
			}
			queue = append(queue, c)
		case b, ok := <-s.msgs:
			if !ok {
				// A closed socket is an interrupt after what was continued.
				closed, spoken = errClosed, heard
				stream.Interrupt(spoken)
				break
			}
			ev, bad := decodeClient(b)
			var err error
			switch {
			case bad != nil:
				err = s.send(ctx, errorEvent(bad))
			case ev.Type == TypeContinue && waiting == nil:
				err = s.send(ctx, errorEvent(invalid("type", "continue before a chunk was sent")))
			case ev.Type == TypeContinue:
				heard += utf8.RuneCountInString(waiting.Text)
				if waiting.Held {
					stream.Continue(waiting.Index)
				}
				waiting = nil
			case ev.Type == TypeInterrupt && (ev.SpokenChars == nil || *ev.SpokenChars < 0):
				err = s.send(ctx, errorEvent(invalid("spoken_chars", "interrupt needs 'spoken_chars' >= 0")))
			case ev.Type == TypeInterrupt:
				spoken = *ev.SpokenChars
				stream.Interrupt(spoken)
			case ev.Type == TypeCreate:
				err = s.send(ctx, errorEvent(invalid("type", "an answer is in progress: interrupt it first")))
			default:
				err = s.send(ctx, errorEvent(invalid("type", "unknown message type %q", ev.Type)))
			}
			if err != nil {
				return err
			}
		}
	}
	// Wait for the engine's final state (an interrupt ends the request
	// within a step).
	for range chunks {
	}
	<-pumped
	res := stream.Result()
	content := text.String()
	if spoken >= 0 {
		content = cut(content, spoken)
	}
	s.conv.Answered(res, content)
	s.add(msgs...)
	s.add(chat.Message{Role: "assistant", Content: jsonText(content)})
	s.fit(0, 0)
	if closed != nil {
		return closed
	}
	m := serving.PacedMetricsOf(res)
	done := ServerEvent{Type: TypeDone, ID: id, FinishReason: string(res.FinishReason),
		Message: &wire.Message{Role: "assistant", Content: content}, Usage: openai.UsageOf(res.Usage), Metrics: &m}
	if e := serving.ResultError(res); res.FinishReason == engine.FinishError && e != nil {
		done.Error = openai.ErrorObject(e)
	}
	return s.send(ctx, done)
}

// MessageOverhead is what a kept message counts against
// Options.MaxHistoryBytes besides its strings.
const MessageOverhead = 64

// historySize is what m counts against Options.MaxHistoryBytes: its
// strings and MessageOverhead.
func historySize(m chat.Message) int {
	n := MessageOverhead + len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Type) + len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

// add appends msgs to the conversation.
func (s *session) add(msgs ...chat.Message) {
	for _, m := range msgs {
		s.history = append(s.history, m)
		s.bytes += historySize(m)
	}
}

// fit makes room for n more messages of size bytes, forgetting the oldest
// messages that are not system messages; false, forgetting nothing, when
// even the system messages leave no room.
func (s *session) fit(n, size int) bool {
	sysN, sysBytes := 0, 0
	for _, m := range s.history {
		if m.Role == "system" {
			sysN++
			sysBytes += historySize(m)
		}
	}
	if sysN+n > s.maxMessages || sysBytes+size > s.maxBytes {
		return false
	}
	forget := 0
	for i, m := range s.history {
		if len(s.history)-forget+n <= s.maxMessages && s.bytes+size <= s.maxBytes {
			break
		}
		if s.history[i].Role != "system" {
			forget++
			s.bytes -= historySize(m)
		}
	}
	s.drop(forget)
	return true
}

// forgetOldest drops the conversation's n oldest messages that are not
// system messages; false when there is none.
func (s *session) forgetOldest(n int) bool {
	for _, m := range s.history {
		if m.Role != "system" {
			s.log.Debug("voice: the conversation outgrew the context; forgetting its oldest messages", "messages", n)
			s.bytes -= s.drop(n)
			return true
		}
	}
	return false
}

// drop removes the n oldest messages that are not system messages, in
// one pass, and returns their size.
func (s *session) drop(n int) int {
	if n == 0 {
		return 0
	}
	size := 0
	kept := s.history[:0]
	for _, m := range s.history {
		if n > 0 && m.Role != "system" {
			n--
			size += historySize(m)
			continue
		}
		kept = append(kept, m)
	}
	clear(s.history[len(kept):]) // let the forgotten text go
	s.history = kept
	return size
}

// pump moves a stream's chunks into out until the stream ends, then
// closes out and pumped.
func pump(ctx context.Context, s *engine.Stream, out chan<- engine.Chunk, pumped chan<- struct{}) {
	defer close(pumped)
	defer close(out)
	for {
		c, err := s.Recv(ctx)
		if err != nil {
			return
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
	}
}

// request reads a response.create's new messages, keeping of them what
// the conversation needs (role, text, name, tool calls), whether it
// resets the conversation, and whether it carries input_audio to
// transcribe. The message itself, with its other fields, is the turn's
// chat completion request.
func (s *session) request(b []byte) (msgs []chat.Message, reset, audio bool, e *serving.Error) {
	var c struct {
		Messages   []chat.Message  `json:"messages"`
		Reset      bool            `json:"reset"`
		InputAudio json.RawMessage `json:"input_audio"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, false, false, invalid("", "invalid response.create: %v", err)
	}
	audio = len(c.InputAudio) > 0 && string(c.InputAudio) != "null"
	if len(c.Messages) == 0 && !audio && (c.Reset || len(s.history) == 0) {
		return nil, false, false, invalid("messages", "'messages' (or 'input_audio') must add at least one message to the conversation")
	}
	msgs = make([]chat.Message, len(c.Messages))
	for i, m := range c.Messages {
		text, err := m.Text()
		if err != nil {
			return nil, false, false, invalid("messages", "message %d: %v", i, err)
		}
		msgs[i] = chat.Message{Role: m.Role, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
		if c := bytes.TrimSpace(m.Content); len(c) > 0 && string(c) != "null" {
			msgs[i].Content = jsonText(text)
		}
	}
	return msgs, c.Reset, audio, nil
}

// admit makes room for a turn's messages in the conversation (see fit),
// which starts anew with reset.
func (s *session) admit(msgs []chat.Message, reset bool) *serving.Error {
	size := 0
	for _, m := range msgs {
		size += historySize(m)
	}
	if reset {
		s.history, s.bytes, s.conv = nil, 0, serving.Conversation{}
	}
	if !s.fit(len(msgs), size) {
		e := invalid("messages", "this turn's %d messages (%d bytes) and the conversation's system messages do not fit in what a conversation keeps: at most %d bytes (corral serve --max-voice-history) in %d messages (--max-messages)",
			len(msgs), size, s.maxBytes, s.maxMessages)
		e.Code = "limit_exceeded"
		return e
	}
	return nil
}

// withMessage is the response.create b with m after its messages and
// without its input_audio (transcribed into m). b has been read as a
// response.create (request), so it reads again.
func withMessage(b []byte, m chat.Message) []byte {
	var c map[string]json.RawMessage
	json.Unmarshal(b, &c)
	var msgs []json.RawMessage
	if raw := c["messages"]; raw != nil {
		json.Unmarshal(raw, &msgs) // null leaves none
	}
	mb, _ := json.Marshal(m) // a message of strings always marshals
	c["messages"], _ = json.Marshal(append(msgs, mb))
	delete(c, "input_audio")
	b, _ = json.Marshal(c)
	return b
}

// jsonText is s as a JSON string, for chat.Message.Content.
func jsonText(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// decodeClient reads a client message's type; b is nil for a binary one.
func decodeClient(b []byte) (ClientEvent, *serving.Error) {
	var ev ClientEvent
	if b == nil {
		return ev, invalid("", "messages are JSON text, not binary")
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		return ev, invalid("", "invalid JSON message: %v", err)
	}
	return ev, nil
}

// send writes one event.
func (s *session) send(ctx context.Context, ev ServerEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		if errors.Is(err, io.EOF) || websocket.CloseStatus(err) != -1 {
			return errClosed
		}
		return err
	}
	return nil
}

func errorEvent(e *serving.Error) ServerEvent {
	return ServerEvent{Type: TypeError, Error: openai.ErrorObject(e)}
}

func invalid(param, format string, args ...any) *serving.Error {
	return &serving.Error{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// cut returns the first n characters of s.
func cut(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
