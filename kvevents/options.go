package kvevents

import (
	"log/slog"
	"time"
)

// The defaults of Options.
const (
	DefaultMaxPeers             = 16
	DefaultMaxSubscriptionBytes = 8 << 10
	DefaultMaxQueueBytes        = 8 << 20
	DefaultHandshakeTimeout     = 10 * time.Second
	DefaultSubscribeTimeout     = 10 * time.Second
	DefaultWriteTimeout         = 10 * time.Second
	DefaultRestateInterval      = time.Second
)

// Options are a Publisher's settings; a zero field takes its default.
type Options struct {
	// Log gets the Publisher's warnings; nil: slog.Default().
	Log *slog.Logger
	// OmitTokens publishes BlockStored events with an empty list of token
	// ids: a subscriber learns the blocks' hashes (all llm-d's indexer
	// v0.4 keys on), never the tokens of the prompts and outputs they
	// hold.
	OmitTokens bool
	// MaxPeers bounds the connections a Publisher holds, subscribers and
	// connections still in their handshake; one more is closed at once.
	// Default DefaultMaxPeers.
	MaxPeers int
	// MaxSubscriptionBytes bounds a subscriber's subscriptions, each
	// counted as its topic prefix's length plus subscriptionOverhead; a
	// subscriber that subscribes past it is cut. It bounds a frame a
	// subscriber may send as well. Default DefaultMaxSubscriptionBytes.
	MaxSubscriptionBytes int
	// MaxQueueBytes bounds the messages queued for one subscriber: a
	// message that would take its queue past it is dropped for that
	// subscriber (counted in Dropped; the sequence number it sees skips),
	// unless the queue is empty, so that a message larger than the bound
	// (the whole state of a large cache) still goes out, one at a time.
	// Default DefaultMaxQueueBytes.
	MaxQueueBytes int
	// HandshakeTimeout bounds a connection's ZMTP handshake. Default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// SubscribeTimeout is how long a subscriber may take, after its
	// handshake, to send its first subscription before it is cut.
	// Default DefaultSubscribeTimeout.
	SubscribeTimeout time.Duration
	// WriteTimeout is how long a subscriber may take no bytes while
	// something waits for it before it is cut, and how long Close waits
	// for it to take what is queued. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// RestateInterval is the least time between two restatements of a
	// topic (the whole state, sent to the subscribers that joined since
	// the last one). Default DefaultRestateInterval.
	RestateInterval time.Duration
}

// withDefaults fills the zero fields of o with their defaults.
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	setInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setInt(&o.MaxPeers, DefaultMaxPeers)
	setInt(&o.MaxSubscriptionBytes, DefaultMaxSubscriptionBytes)
	setInt(&o.MaxQueueBytes, DefaultMaxQueueBytes)
	setDur(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&o.SubscribeTimeout, DefaultSubscribeTimeout)
	setDur(&o.WriteTimeout, DefaultWriteTimeout)
	setDur(&o.RestateInterval, DefaultRestateInterval)
	return o
}
