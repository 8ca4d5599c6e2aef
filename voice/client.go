package voice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/coder/websocket"
)

// Client is one conversation on a /v1/voice socket. A goroutine reads
// the socket all along, so the server's pings get their pongs however
// long the client takes between two Next calls (speaking a chunk, say).
// Its methods are not for concurrent use, except that Continue, Interrupt
// and Close may be called while another goroutine waits in Next.
type Client struct {
	conn   *websocket.Conn
	events chan []byte   // messages read; closed when the socket is
	err    error         // why reading stopped; read after events closed
	done   chan struct{} // closed when the reader has returned
}

// Dial opens a conversation at url (ws:// or http://…/v1/voice); hc nil
// means http.DefaultClient.
func Dial(ctx context.Context, url string, hc *http.Client) (*Client, error) {
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("voice: dial %s: %w", url, err)
	}
	conn.SetReadLimit(MaxMessage)
	c := &Client{conn: conn, events: make(chan []byte, 16), done: make(chan struct{})}
	go c.read()
	return c, nil
}

// read queues the server's messages until the socket closes.
func (c *Client) read() {
	defer close(c.done)
	defer close(c.events)
	for {
		_, b, err := c.conn.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		c.events <- b
	}
}

// Create asks for the next answer: fields are chat completion fields
// ("messages" to add to the conversation, "chunking", "max_tokens", …).
func (c *Client) Create(ctx context.Context, fields map[string]any) error {
	m := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		m[k] = v
	}
	m["type"] = TypeCreate
	return c.Send(ctx, m)
}

// Next waits for the server's next event.
func (c *Client) Next(ctx context.Context) (ServerEvent, error) {
	var ev ServerEvent
	select {
	case b, ok := <-c.events:
		if !ok {
			return ev, fmt.Errorf("voice: read: %w", c.err)
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			return ev, fmt.Errorf("voice: bad event %q: %w", b, err)
		}
		return ev, nil
	case <-ctx.Done():
		return ev, ctx.Err()
	}
}

// Continue says the client is done with the last chunk.
func (c *Client) Continue(ctx context.Context) error {
	return c.Send(ctx, ClientEvent{Type: TypeContinue})
}

// Interrupt stops the answer after the listener heard spokenChars
// characters of it.
func (c *Client) Interrupt(ctx context.Context, spokenChars int) error {
	return c.Send(ctx, ClientEvent{Type: TypeInterrupt, SpokenChars: &spokenChars})
}

// Close ends the conversation and waits for the reader.
func (c *Client) Close() error {
	go func() { // drop what nobody will read; ends with the reader
		for range c.events {
		}
	}()
	err := c.conn.Close(websocket.StatusNormalClosure, "")
	<-c.done
	return err
}

// Send writes v as one JSON message; the methods above cover the protocol.
func (c *Client) Send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("voice: write: %w", err)
	}
	return nil
}
