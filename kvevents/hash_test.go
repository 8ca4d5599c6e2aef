package kvevents_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/corral-llm/corral/kvevents"
)

// TestHashEncoding: the bytes hashed are the canonical CBOR of
// [parent, tokens, extra], down to the shortest integer heads. The
// vectors were checked against llm-d's token processor (which encodes
// with fxamacker/cbor) by deploy/picker's TestKVEventsIndex.
func TestHashEncoding(t *testing.T) {
	// Root(""): SHA-256 of the CBOR empty text string, 0x60.
	if got, want := kvevents.Root(""), kvevents.Hash(sha256.Sum256([]byte{0x60})); got != want {
		t.Errorf("Root(\"\") = %x; want %x", got, want)
	}
	var parent kvevents.Hash
	for i := range parent {
		parent[i] = byte(i)
	}
	tokens := []int32{0, 23, 24, 255, 256, 65535, 65536, 1 << 30}
	enc := "83" + "5820" + hex.EncodeToString(parent[:]) +
		"88" + "00" + "17" + "1818" + "18ff" + "190100" + "19ffff" + "1a00010000" + "1a40000000"
	for _, c := range []struct {
		extra []string
		tail  string
	}{
		{nil, "f6"},
		{[]string{"salt"}, "81" + "6473616c74"},
	} {
		b, _ := hex.DecodeString(enc + c.tail)
		if got, want := kvevents.Sum(parent, tokens, c.extra), kvevents.Hash(sha256.Sum256(b)); got != want {
			t.Errorf("extra %q: %x; want the hash of %s", c.extra, got, enc+c.tail)
		}
	}
}
