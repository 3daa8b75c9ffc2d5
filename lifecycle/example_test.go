package lifecycle_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/lifecycle"
	"github.com/sbxdb/sbxdb/memstore"
)

// A host keys the provider sandbox it may resume by the thread, the
// sandbox definition, the provider, the workspace and the tenant, and
// records it in the instance store under that key.
func Example() {
	ctx := context.Background()
	store, _ := memstore.New(sbxdb.Options{})
	key, _ := lifecycle.InstanceKey(lifecycle.KeyInput{
		ThreadID: "thread-1", SandboxID: "node-20", ProviderName: "docker",
		Workspace: map[string]any{"source": map[string]any{"type": "git", "url": "https://example.invalid/app.git"}},
	})
	store.Instances().Upsert(ctx, sbxdb.InstanceRecord{Key: key, Provider: "docker", ProviderSandboxID: "c0ffee",
		ThreadID: "thread-1", UpdatedAt: time.Now().UnixMilli()})
	rec, _ := store.Instances().Get(ctx, key)
	fmt.Println(len(key), rec.ProviderSandboxID)
	// Output: 16 c0ffee
}
