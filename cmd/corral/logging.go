package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// logFlags are the logging flags of corral serve and corral supervise.
type logFlags struct {
	level, format *string
}

// addLogFlags defines -log-level and -log-format on fs.
func addLogFlags(fs *flag.FlagSet) logFlags {
	return logFlags{
		level:  fs.String("log-level", "info", "log `level`: debug, info, warn or error"),
		format: fs.String("log-format", "text", "log `format`: text (key=value) or json (one object a line)"),
	}
}

// logger returns the logger the flags ask for, writing to w.
func (f logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return newLogger(w, *f.format, level)
}

// newLogger returns a logger writing to w in format ("text" or "json")
// at level and above.
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opt := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opt)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opt)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}
