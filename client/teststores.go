package client

// Test stores of a server run with sbxdb serve --test (docs/API.md, Test
// mode): creating and deleting them, and the headers by which a client's
// requests are served by one (Options.TestStore, Options.Now).

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// checkTestStore refuses a TestStore that is no header value: one holding
// a control character or a byte that is not ASCII. Every id a server makes
// is 32 hexadecimal digits.
func checkTestStore(opts *Options) error {
	for i := 0; i < len(opts.TestStore); i++ {
		if b := opts.TestStore[i]; b < 0x20 || b >= 0x7f {
			return fmt.Errorf("client: test store %q is not a header value", opts.TestStore)
		}
	}
	return nil
}

// TestStoreOptions are the lease timings of a new test store; zero means
// the engine's default (sbxdb.DefaultLeaseDuration,
// sbxdb.DefaultRenewAfter). They travel in whole milliseconds.
type TestStoreOptions struct {
	LeaseDuration time.Duration
	RenewAfter    time.Duration
}

// CreateTestStore opens a fresh, empty test store on the server and
// returns its id, for Options.TestStore (POST /v1/test/stores). A server
// without test mode refuses it (ErrForbidden); timings the engine refuses
// are ErrBadRequest.
func (c *Client) CreateTestStore(ctx context.Context, opts TestStoreOptions) (string, error) {
	in := map[string]any{}
	if opts.LeaseDuration != 0 {
		in["leaseDurationMs"] = opts.LeaseDuration.Milliseconds()
	}
	if opts.RenewAfter != 0 {
		in["renewAfterMs"] = opts.RenewAfter.Milliseconds()
	}
	var out struct {
		Store string `json:"store"`
	}
	if err := c.call(ctx, "/v1/test/stores", in, &out); err != nil {
		return "", err
	}
	return out.Store, nil
}

// DeleteTestStore closes the test store id and removes it
// (DELETE /v1/test/stores/{id}); an unknown id is no error.
func (c *Client) DeleteTestStore(ctx context.Context, id string) error {
	req, err := c.newRequest(ctx, http.MethodDelete, "/v1/test/stores/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
