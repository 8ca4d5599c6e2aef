package main

import (
	"context"
	"errors"
)

func runPull(ctx context.Context, args []string) error   { return errors.New("not implemented") }
func runList(ctx context.Context, args []string) error   { return errors.New("not implemented") }
func runRemove(ctx context.Context, args []string) error { return errors.New("not implemented") }
func runShow(ctx context.Context, args []string) error   { return errors.New("not implemented") }
