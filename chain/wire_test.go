package chain_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
)

// A request member decodes to its value or to something the validators
// refuse with the contract's code; decoding itself never fails.
func TestWireDecodingLeavesTheVerdictToTheValidators(t *testing.T) {
	type req struct {
		ID        chain.WireString `json:"id"`
		CreatedAt chain.WireInt    `json:"createdAt"`
		Writer    chain.Writer     `json:"writer"`
	}
	cases := []struct {
		body              string
		idErr, createdErr error
		thread, token     string
		fence             uint64
	}{
		{`{"id":"a/b","createdAt":7,"writer":{"threadId":"t","ownerToken":"o","fence":3}}`, nil, nil, "t", "o", 3},
		{`{"id":"\ud800","createdAt":1.5,"writer":{"threadId":7,"ownerToken":9,"fence":-1}}`, chain.ErrInvalidID, chain.ErrInvalidEntry, chain.NotAString, "", 0},
		{`{"id":7,"createdAt":"1","writer":"w"}`, chain.ErrInvalidID, chain.ErrInvalidEntry, chain.NotAString, "", 0},
		{`{"id":null,"createdAt":null,"writer":null}`, chain.ErrInvalidID, chain.ErrInvalidEntry, chain.NotAString, "", 0},
		{`{"id":"","createdAt":9007199254740992}`, chain.ErrInvalidID, chain.ErrInvalidEntry, "", "", 0},
	}
	for _, c := range cases {
		var r req
		if err := json.Unmarshal([]byte(c.body), &r); err != nil {
			t.Fatalf("%s: decoding failed: %v", c.body, err)
		}
		if err := chain.CheckID("id", string(r.ID)); !errors.Is(err, c.idErr) || (c.idErr == nil) != (err == nil) {
			t.Errorf("%s: CheckID(%q) = %v, want %v", c.body, r.ID, err, c.idErr)
		}
		if err := chain.CheckCreatedAt("createdAt", int64(r.CreatedAt)); !errors.Is(err, c.createdErr) || (c.createdErr == nil) != (err == nil) {
			t.Errorf("%s: CheckCreatedAt(%d) = %v, want %v", c.body, r.CreatedAt, err, c.createdErr)
		}
		if r.Writer.ThreadID != c.thread || r.Writer.OwnerToken != c.token || r.Writer.Fence != c.fence {
			t.Errorf("%s: writer = %+v", c.body, r.Writer)
		}
	}
}

// A lone surrogate goes out as the escape it came in as.
func TestWireStringRoundTrip(t *testing.T) {
	var s chain.WireString
	if err := json.Unmarshal([]byte(`"x\ud800y"`), &s); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil || string(out) != `"x\ud800y"` {
		t.Fatalf("Marshal = %s, %v", out, err)
	}
}
