package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// maxToolOutput bounds what a tool command may print.
const maxToolOutput = 1 << 20

// CommandTools is a ToolRunner that runs one command per tool name: the
// call's arguments go to its stdin as a JSON object and its stdout,
// trimmed, is the result. A non-zero exit is a tool error carrying the start
// of stderr.
type CommandTools map[string][]string

// RunTool runs the command of call.Name.
func (c CommandTools) RunTool(ctx context.Context, call ToolInvocation) (any, error) {
	argv := c[call.Name]
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command for tool %q", call.Name)
	}
	in, err := json.Marshal(call.Arguments)
	if err != nil {
		return nil, fmt.Errorf("tool %s: encode arguments: %w", call.Name, err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	stdout := &limitedBuffer{max: maxToolOutput}
	stderr := &limitedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("tool %s: %w: %s", call.Name, err, strings.TrimSpace(stderr.String()))
	}
	if stdout.over {
		return nil, fmt.Errorf("tool %s: output longer than %d bytes", call.Name, maxToolOutput)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// limitedBuffer keeps the first max bytes written and notes overflow.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
