package server

import "net/http"

// Middleware is s.middleware, for server_test.go (package server_test,
// which shares the e2etest harness with the end-to-end tests).
func (s *Server) Middleware(h http.Handler) http.Handler { return s.middleware(h) }
