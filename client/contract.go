package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// TODO(contract): every method below is a stub until the contract change.

func (c *Client) Get(ctx context.Context, id string) (*chain.Checkpoint, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) Head(ctx context.Context, threadID string) (string, error) {
	return "", errors.ErrUnsupported
}

func (c *Client) Append(ctx context.Context, in chain.AppendInput) (string, error) {
	return "", errors.ErrUnsupported
}

func (c *Client) DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error {
	return errors.ErrUnsupported
}

func (c *Client) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	return c.AcquireWriterWith(ctx, threadID, lease.AcquireOptions{})
}

func (c *Client) AcquireWriterWith(ctx context.Context, threadID string, opts lease.AcquireOptions) (*lease.Lease, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) RenewWriter(ctx context.Context, w lease.Writer) (time.Time, error) {
	return time.Time{}, errors.ErrUnsupported
}

func (c *Client) ReleaseWriter(ctx context.Context, w lease.Writer) error {
	return errors.ErrUnsupported
}

func (c *Client) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) LoadThread(ctx context.Context, threadID string) ([]json.RawMessage, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) SaveThread(ctx context.Context, threadID string, msgs []json.RawMessage) error {
	return errors.ErrUnsupported
}

func (c *Client) Instances() engine.InstanceStore { return nil }

func (c *Client) Threads(ctx context.Context) ([]string, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) Writers(ctx context.Context) (map[string]lease.State, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) Unlock(ctx context.Context, threadID string) (lease.State, error) {
	return lease.State{}, errors.ErrUnsupported
}
