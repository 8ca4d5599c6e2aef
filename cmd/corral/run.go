package main

import (
	"context"
	"errors"
)

func runRun(ctx context.Context, args []string) error { return errors.New("not implemented") }
