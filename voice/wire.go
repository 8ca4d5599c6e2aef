// Package voice serves paced, interruptible answers to voice agents over
// a WebSocket (GET /v1/voice): the model's answer arrives one
// sentence-sized chunk at a time, each sent when the client's
// text-to-speech is ready for it, and generation waits in the engine
// (slot, KV cache and sampler kept, nothing evaluated twice) until the
// client says "continue"; a barge-in is an "interrupt" that keeps in the
// conversation, and in the KV cache, only what the listener heard.
//
// One socket carries a conversation: the server keeps its messages, so
// each turn sends only the new ones, and the next turn's prompt starts
// with the previous one's, found in the KV cache.
//
// The protocol, one JSON object per text message:
//
//	client → server
//	  {"type":"response.create", "messages":[…new messages…], "chunking":{…}, "reset":false, …chat completion fields…}
//	  {"type":"response.create", "input_audio":{"data":base64 WAV, "format":"wav"}, …}   the user spoke: see below
//	  {"type":"continue"}                       the client is done with the last chunk sent
//	  {"type":"interrupt", "spoken_chars":N}    the user barged in after hearing N characters of this answer
//	server → client
//	  {"type":"transcript", "text":…}             what the turn's input_audio said
//	  {"type":"response.created", "id":…}
//	  {"type":"chunk", "id":…, "index":n, "text":…, "last":bool}   then nothing until continue or interrupt
//	  {"type":"done", "id":…, "finish_reason":…, "message":{"role":"assistant","content":…}, "usage":{…}, "metrics":{…}}
//	  {"type":"error", "error":{"message","type","param","code"}}
//
// "done" follows the continue (or interrupt) of the last chunk; its
// message is what the conversation keeps. A closed socket interrupts the
// answer after the chunks the client continued.
//
// A turn may carry the user's speech instead of (or after) text
// messages: its input_audio is transcribed on the turn's model, which
// must take audio, through the same scheduler (Generator.Transcribe),
// and the transcript joins the conversation as a user message, after the
// turn's messages; the client gets it as a "transcript" event before
// response.created. The sound is bounded by the server's media limits and
// by MaxMessage, and is decoded before any slot is taken.
package voice

import (
	"encoding/json"

	"github.com/corral-llm/corral/wire"
)

// Message types.
const (
	TypeCreate     = "response.create"
	TypeContinue   = "continue"
	TypeInterrupt  = "interrupt"
	TypeCreated    = "response.created"
	TypeTranscript = "transcript"
	TypeChunk      = "chunk"
	TypeDone       = "done"
	TypeError      = "error"
)

// ClientEvent is a message from the client. A response.create carries
// a chat completion request besides (see Create).
type ClientEvent struct {
	Type        string `json:"type"`
	SpokenChars *int   `json:"spoken_chars,omitempty"` // interrupt
}

// Create is the response.create message: chat completion fields, of
// which Messages are added to the conversation (Reset empties it first),
// then InputAudio's transcript as a user message. Other fields
// (temperature, max_tokens, chunking, …) apply to this answer only.
type Create struct {
	Messages   []json.RawMessage `json:"messages"`
	InputAudio *InputAudio       `json:"input_audio,omitempty"`
	Reset      bool              `json:"reset,omitempty"`
	Chunking   json.RawMessage   `json:"chunking,omitempty"`
}

// InputAudio is what the user said: a sound (WAV), in base64, as a chat
// completion's input_audio part carries one. Format, when given, must be
// what the bytes are ("wav").
type InputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format,omitempty"`
}

// ServerEvent is a message from the server; Type says which fields are set.
type ServerEvent struct {
	Type         string             `json:"type"`
	ID           string             `json:"id,omitempty"`
	Index        *int               `json:"index,omitempty"` // chunk
	Text         string             `json:"text,omitempty"`
	Last         bool               `json:"last,omitempty"`
	FinishReason string             `json:"finish_reason,omitempty"`
	Message      *wire.Message      `json:"message,omitempty"`
	Usage        *wire.Usage        `json:"usage,omitempty"`
	Metrics      *wire.PacedMetrics `json:"metrics,omitempty"`
	Error        *wire.ErrorObject  `json:"error,omitempty"`
}
