package engine

import (
	"context"
	"testing"
)

func TestCPUShare(t *testing.T) {
	cpu := NewCPU(2)
	all, err := cpu.acquire(context.Background(), 8) // more threads than cores: all the cores
	if err != nil {
		t.Fatal(err)
	}
	if cpu.sem.TryAcquire(1) {
		t.Fatal("a core was free while a pass held them all")
	}
	all()
	one, err := cpu.acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !cpu.sem.TryAcquire(1) {
		t.Fatal("one thread's pass held both cores")
	}
	cpu.sem.Release(1)
	one()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	held, _ := cpu.acquire(context.Background(), 2)
	if _, err := cpu.acquire(cancelled, 1); err == nil {
		t.Fatal("a wait for cores did not end with its context")
	}
	held()
}
