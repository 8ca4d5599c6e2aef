package serving

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// KeepAlive is Ollama's keep_alive request field: how long the model
// stays loaded after the request, as a duration string ("5m", "1h30m") or
// a number of seconds; 0 unloads it when the request ends, a negative
// value ("-1", -1, "-1m") keeps it loaded.
type KeepAlive struct {
	Duration time.Duration
}

// UnmarshalJSON reads a number of seconds or a duration string.
func (k *KeepAlive) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case float64:
		k.Duration = seconds(v)
		return nil
	case string:
		d, err := ParseKeepAlive(v)
		k.Duration = d
		return err
	}
	return fmt.Errorf("keep_alive: want a duration string or a number of seconds, got %s", b)
}

// ParseKeepAlive reads a keep-alive written as text: a duration ("5m") or
// a number of seconds; negative means forever (-1).
func ParseKeepAlive(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return seconds(f), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("keep_alive %q: want a duration such as \"5m\" or a number of seconds", s)
	}
	return max(d, -1), nil
}

// seconds converts a number of seconds; negative means forever (-1).
func seconds(f float64) time.Duration {
	if f < 0 {
		return -1
	}
	return time.Duration(f * float64(time.Second))
}

// MarshalJSON writes the duration as Go writes it ("5m0s"), "-1" for
// forever.
func (k KeepAlive) MarshalJSON() ([]byte, error) {
	if k.Duration < 0 {
		return []byte(`-1`), nil
	}
	return json.Marshal(k.Duration.String())
}
