package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads every event of input, one byte per read so that every
// split of the input is exercised.
func readAll(t *testing.T, r *Reader) ([]Event, error) {
	t.Helper()
	var evs []Event
	for {
		ev, err := r.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestReader(t *testing.T) {
	type want struct {
		data    string
		name    string
		done    bool
		comment string
	}
	cases := []struct {
		name     string
		in       string
		comments bool
		want     []want
	}{
		{"one event", "data: {\"a\":1}\n\n", false, []want{{data: `{"a":1}`}}},
		{"no space after colon", "data:{\"a\":1}\n\n", false, []want{{data: `{"a":1}`}}},
		{"only one space removed", "data:  x\n\n", false, []want{{data: " x"}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", false, []want{{data: "a"}, {data: "b"}}},
		{"cr", "data: a\r\rdata: b\r\r", false, []want{{data: "a"}, {data: "b"}}},
		{"multi-line data", "data: a\ndata: b\n\n", false, []want{{data: "a\nb"}}},
		{"empty data line", "data\n\n", false, []want{{data: ""}}},
		{"comments skipped", ": ping\n\ndata: a\n\n:x\n\n", false, []want{{data: "a"}}},
		{"comments surfaced", ": ping\n\ndata: a\n\n:x\n\n", true, []want{{comment: "ping"}, {data: "a"}, {comment: "x"}}},
		{"other fields ignored", "id: 7\nretry: 10\nevent: delta\nfoo\ndata: a\n\n", false, []want{{data: "a", name: "delta"}}},
		{"no data, no event", "event: x\n\nid: 1\n\n", false, nil},
		{"missing final blank line", "data: a\n\ndata: b\n", false, []want{{data: "a"}, {data: "b"}}},
		{"missing final newline", "data: a\n\ndata: b", false, []want{{data: "a"}, {data: "b"}}},
		{"done", "data: {}\n\ndata: [DONE]\n\n", false, []want{{data: "{}"}, {data: "[DONE]", done: true}}},
		{"done with spaces", "data:  [DONE] \r\n\r\n", false, []want{{data: " [DONE] ", done: true}}},
		{"empty", "", false, nil},
		{"blank lines only", "\n\r\n\n", false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(iotest.OneByteReader(strings.NewReader(c.in)))
			r.Comments = c.comments
			evs, err := readAll(t, r)
			if err != io.EOF {
				t.Fatalf("err = %v, want io.EOF", err)
			}
			if len(evs) != len(c.want) {
				t.Fatalf("got %d events %+v, want %d", len(evs), evs, len(c.want))
			}
			for i, w := range c.want {
				ev := evs[i]
				if string(ev.Data) != w.data || ev.Name != w.name || ev.Done != w.done || ev.Comment != w.comment || ev.IsComment != (w.comment != "") {
					t.Errorf("event %d = %+v (data %q), want %+v", i, ev, ev.Data, w)
				}
			}
			// And again at EOF: still io.EOF.
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after the end: %v, want io.EOF", err)
			}
		})
	}
}

func TestReaderLineTooLong(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, in := range []string{
		"data: " + long + "\n\n",                               // one long line
		"data: " + long[:60] + "\ndata: " + long[:60] + "\n\n", // joined data too long
		": " + long + "\n\n",                                   // a comment too
	} {
		r := NewReader(strings.NewReader("data: ok\n\n" + in))
		r.MaxLine = 80
		ev, err := r.Next()
		if err != nil || string(ev.Data) != "ok" {
			t.Fatalf("first event: %+v, %v", ev, err)
		}
		if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) {
			t.Errorf("%.20q…: err = %v, want ErrLineTooLong", in, err)
		}
	}
	// At the limit is fine.
	r := NewReader(strings.NewReader("data: " + long + "\n\n"))
	r.MaxLine = len("data: " + long)
	if ev, err := r.Next(); err != nil || string(ev.Data) != long {
		t.Errorf("at the limit: %v", err)
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "a" {
		t.Fatalf("first: %+v, %v", ev, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestReaderKeepsData(t *testing.T) {
	r := NewReader(strings.NewReader("data: first\n\ndata: second\n\n"))
	a, _ := r.Next()
	b, _ := r.Next()
	if string(a.Data) != "first" || string(b.Data) != "second" {
		t.Errorf("got %q, %q", a.Data, b.Data)
	}
}

// countWriter records each Write call.
type countWriter struct{ writes []string }

func (w *countWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestWriter(t *testing.T) {
	var cw countWriter
	w := NewWriter(&cw)
	if err := w.Event(map[string]string{"a": "b\n"}); err != nil {
		t.Fatal(err)
	}
	w.Comment("ping")
	w.Data([]byte("x\ny"))
	w.Done()
	want := []string{"data: {\"a\":\"b\\n\"}\n\n", ": ping\n\n", "data: x\ndata: y\n\n", "data: [DONE]\n\n"}
	if strings.Join(cw.writes, "|") != strings.Join(want, "|") {
		t.Errorf("writes = %q, want %q", cw.writes, want)
	}
	if err := w.Event(func() {}); err == nil {
		t.Error("an event that does not encode: no error")
	}
}

// TestRoundTrip reads back what the Writer wrote.
func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Data([]byte("one"))
	w.Comment("ping")
	w.Data([]byte("two\nlines"))
	w.Done()
	r := NewReader(&buf)
	r.Comments = true
	evs, err := readAll(t, r)
	if err != io.EOF || len(evs) != 4 {
		t.Fatalf("%+v, %v", evs, err)
	}
	if string(evs[0].Data) != "one" || evs[1].Comment != "ping" || string(evs[2].Data) != "two\nlines" || !evs[3].Done {
		t.Errorf("got %+v", evs)
	}
}

func TestDecodeEvent(t *testing.T) {
	var ch ChatCompletionChunk
	if err := DecodeEvent([]byte(`{"choices":[{"delta":{"content":"error"}}]}`), &ch); err != nil || ch.Choices[0].Delta.Text() != "error" {
		t.Fatalf("chunk: %+v, %v", ch, err)
	}
	err := DecodeEvent([]byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":"x"}}`), &ch)
	var ee *EventError
	if !errors.As(err, &ee) || ee.Error() != "boom" || *ee.Object.Code != "x" {
		t.Errorf("error event: %v", err)
	}
	if err := DecodeEvent([]byte(`{"error":"plain"}`), &ch); !errors.As(err, &ee) || ee.Error() != `"plain"` {
		t.Errorf("string error: %v", err)
	}
	if err := DecodeEvent([]byte(`{"error":null,"choices":[]}`), &ch); err != nil {
		t.Errorf("null error: %v", err)
	}
	if err := DecodeEvent([]byte(`{oops`), &ch); err == nil || errors.As(err, &ee) {
		t.Errorf("bad JSON: %v", err)
	}
}
