package redisx_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Middleware wraps handlers; Permanent marks errors that retrying cannot
// fix, so the event is dead-lettered at once.
func ExampleChain() {
	logged := func(next redisx.Handler) redisx.Handler {
		return func(ctx context.Context, e redisx.Event) error {
			err := next(ctx, e)
			fmt.Printf("%s %s: permanent=%v\n", e.Op, e.ID, redisx.IsPermanent(err))
			return err
		}
	}
	h := redisx.Chain(func(ctx context.Context, e redisx.Event) error {
		if e.Source == nil {
			return redisx.Permanent(fmt.Errorf("event %s has no source", e.ID))
		}
		return nil
	}, logged)
	_ = h(context.Background(), redisx.Event{Op: redisx.OpUpsert, ID: "a", Source: json.RawMessage(`{}`)})
	_ = h(context.Background(), redisx.Event{Op: redisx.OpUpsert, ID: "b"})
	// Output:
	// upsert a: permanent=false
	// upsert b: permanent=true
}
