package kit

import (
	"context"
	"errors"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrCrash is what a CountingClient returns once its write budget is spent.
var ErrCrash = errors.New("simulated crash: write budget spent")

// CountingClient counts the writes a controller makes, the status
// subresource's included, in Writes. With a Budget, every write after the
// budget fails with ErrCrash without reaching the API server: that is how a
// crash test stops a reconciler between any two of its writes, as a killed
// process would.
type CountingClient struct {
	client.Client
	Writes *atomic.Int64
	Budget int64 // negative: unlimited
}

func (c CountingClient) write() error {
	if n := c.Writes.Add(1); c.Budget >= 0 && n > c.Budget {
		return ErrCrash
	}
	return nil
}

// Create counts a write, then creates obj unless the budget is spent.
func (c CountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

// Update counts a write, then updates obj unless the budget is spent.
func (c CountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

// Patch counts a write, then patches obj unless the budget is spent.
func (c CountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Delete counts a write, then deletes obj unless the budget is spent.
func (c CountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

// Status returns the status writer, whose writes count too.
func (c CountingClient) Status() client.SubResourceWriter {
	return countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c CountingClient
}

func (s countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
