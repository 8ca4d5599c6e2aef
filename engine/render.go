package engine

import "context"

// Render returns the token ids Submit would evaluate for req's prompt,
// checked as Submit checks them (a prompt over a slot's context, empty,
// or with ids outside the vocabulary is an error; a medium's cells are
// negative placeholders, see Media), without queueing or
// running anything: a router's view of the exact tokens a request is.
// At most a few Render and Submit calls tokenize at once; Render waits
// for its turn or gives up when ctx ends.
func (e *Engine) Render(ctx context.Context, req Request) ([]int32, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, ErrClosed
	}
	select {
	case e.prep <- struct{}{}:
		defer func() { <-e.prep }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if len(req.Media) > 0 {
		select {
		case e.mediaReqs <- struct{}{}:
			defer func() { <-e.mediaReqs }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	toks, media, err := e.promptTokens(&req)
	freeMedia(media)
	return toks, err
}
