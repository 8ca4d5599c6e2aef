package registry

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDraining means the registry is shutting down.
var ErrDraining = errors.New("the server is shutting down")

// UnknownModelError is the error of a request naming no known model.
type UnknownModelError struct {
	Name  string
	Known []string
}

func (e *UnknownModelError) Error() string {
	return fmt.Sprintf("the model %q does not exist; known models: %s", e.Name, strings.Join(e.Known, ", "))
}

// TooLargeError is the error of a request for a model whose need exceeds
// the whole memory budget, the host's or a device's: it can never load.
type TooLargeError struct {
	ID string
	// Device names the device whose budget is too small; "" for the
	// host's.
	Device       string
	Need, Budget int64
}

func (e *TooLargeError) Error() string {
	if e.Device != "" {
		if e.Budget == 0 {
			return fmt.Sprintf("the model %q is placed on the device %s, which is not among the devices found", e.ID, e.Device)
		}
		return fmt.Sprintf("the model %q needs %s of memory on %s, more than its whole budget of %s (--device-memory); offload fewer layers (-ngl)",
			e.ID, FormatBytes(e.Need), e.Device, FormatBytes(e.Budget))
	}
	return fmt.Sprintf("the model %q needs %s of memory, more than the whole budget of %s (--memory-budget)",
		e.ID, FormatBytes(e.Need), FormatBytes(e.Budget))
}

// Holder is a model holding memory when a request found none.
type Holder struct {
	ID    string
	State State
	// Need is its host memory, Devices its memory on each device.
	Need     int64
	Devices  map[string]int64
	Requests int
}

// BusyError is the error of a request whose model could not get memory:
// every model holding some was in use for as long as the request could
// wait, or too many requests were waiting already.
type BusyError struct {
	ID string
	// Device names the device whose budget lacks room; "" for the
	// host's. Need, Budget and Used are that budget's.
	Device             string
	Need, Budget, Used int64
	Why                string
	Holders            []Holder
}

func (e *BusyError) Error() string {
	var b strings.Builder
	where := "memory"
	if e.Device != "" {
		where = "memory on " + e.Device
	}
	fmt.Fprintf(&b, "the model %q needs %s of %s and %s of the %s budget are free: %s",
		e.ID, FormatBytes(e.Need), where, FormatBytes(max(0, e.Budget-e.Used)), FormatBytes(e.Budget), e.Why)
	if len(e.Holders) > 0 {
		b.WriteString("; held by")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			held := h.Need // of the budget that lacks room
			if e.Device != "" {
				held = h.Devices[e.Device]
			}
			fmt.Fprintf(&b, " %s (%s, %s, %d requests)", h.ID, h.State, FormatBytes(held), h.Requests)
		}
	}
	return b.String()
}

// LoadError is the error of a request whose model failed to load.
type LoadError struct {
	ID  string
	Err error
}

func (e *LoadError) Error() string { return fmt.Sprintf("load model %q: %v", e.ID, e.Err) }

func (e *LoadError) Unwrap() error { return e.Err }
