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
// the whole memory budget: it can never load.
type TooLargeError struct {
	ID           string
	Need, Budget int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the model %q needs %s of memory, more than the whole budget of %s (--memory-budget)",
		e.ID, FormatBytes(e.Need), FormatBytes(e.Budget))
}

// Holder is a model holding memory when a request found none.
type Holder struct {
	ID       string
	State    State
	Need     int64
	Requests int
}

// BusyError is the error of a request whose model could not get memory:
// every model holding some was in use for as long as the request could
// wait, or too many requests were waiting already.
type BusyError struct {
	ID                 string
	Need, Budget, Used int64
	Why                string
	Holders            []Holder
}

func (e *BusyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the model %q needs %s of memory and %s of the %s budget are free: %s",
		e.ID, FormatBytes(e.Need), FormatBytes(max(0, e.Budget-e.Used)), FormatBytes(e.Budget), e.Why)
	if len(e.Holders) > 0 {
		b.WriteString("; held by")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s (%s, %s, %d requests)", h.ID, h.State, FormatBytes(h.Need), h.Requests)
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
