package client

import (
	"context"
	"errors"
	"io"

	"github.com/sbxdb/sbxdb/engine"
)

// TODO(objects): every method below is a stub until the objects change.

func (c *Client) PutObject(ctx context.Context, key string, r io.Reader, opts engine.PutObjectOptions) (engine.ObjectInfo, error) {
	return engine.ObjectInfo{}, errors.ErrUnsupported
}

// OpenObject returns a reader of key's bytes from offset off, at most n of
// them (n < 0: to the end).
func (c *Client) OpenObject(ctx context.Context, key string, off, n int64) (io.ReadCloser, engine.ObjectInfo, error) {
	return nil, engine.ObjectInfo{}, errors.ErrUnsupported
}

func (c *Client) StatObject(ctx context.Context, key string) (engine.ObjectInfo, error) {
	return engine.ObjectInfo{}, errors.ErrUnsupported
}

func (c *Client) DeleteObject(ctx context.Context, key string) error {
	return errors.ErrUnsupported
}

func (c *Client) ListObjects(ctx context.Context, prefix, cursor string, limit int) ([]engine.ObjectInfo, string, error) {
	return nil, "", errors.ErrUnsupported
}

func (c *Client) ArtifactRecords() engine.ArtifactRecords { return nil }
