package workspace_test

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
)

// BenchmarkPolicySkip asks the policy about 20,000 paths of a monorepo,
// as a capture's walk does once per entry: under the default policy, and
// with two exclude globs and an include.
func BenchmarkPolicySkip(b *testing.B) {
	paths := make([]string, 0, 20_000)
	for i := range cap(paths) {
		paths = append(paths, fmt.Sprintf("packages/p%03d/src/module%02d/file%05d.ts", i%200, i%30, i))
	}
	globbed, err := workspace.Policy{}.WithGlobs([]string{"*.log", "dist/"}, []string{"packages/"})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		p    workspace.Policy
	}{{"default", workspace.Policy{}}, {"globs", globbed}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				for _, p := range paths {
					if bc.p.Skip(p, chain.KindFile) || !bc.p.Wants(p, chain.KindFile) {
						b.Fatal(p)
					}
				}
			}
		})
	}
}
