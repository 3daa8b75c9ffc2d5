package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sbxdb/sbxdb/engine"
)

var versionCmd = register(&command{
	name:    "version",
	group:   groupOther,
	noStore: true,
	summary: "Print this build's version, commit and store format",
	detail: `Prints the module version ("(devel)" for a build from a source tree), the
commit it was built from, "(dirty)" when the tree had changes not
committed, the Go version, and the store format this build writes (it
reads older formats once migrated: sbxdb migrate). The commit is "-" when
the build did not record one (go run, go test, a build outside the
repository). sbxdb --version prints the same. With --json: {version,
commit, dirty, go, storeFormat}.`,
	run: runVersion,
})

// buildInfo is what sbxdb version prints.
type buildInfo struct {
	Version     string `json:"version"`
	Commit      string `json:"commit,omitempty"`
	Dirty       bool   `json:"dirty"`
	Go          string `json:"go"`
	StoreFormat int    `json:"storeFormat"`
}

// readBuildInfo returns this build's version and commit from the build
// information the go command records.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildInfoOf(bi)
}

// buildInfoOf returns what sbxdb version prints of bi (nil: none
// recorded).
func buildInfoOf(bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "(devel)", Go: runtime.Version(), StoreFormat: engine.FormatVersion}
	if bi == nil {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Dirty = s.Value == "true"
		}
	}
	return b
}

func runVersion(inv *invocation, _ []string) error {
	b := readBuildInfo()
	if inv.json {
		return writeJSON(inv.out, b)
	}
	commit := cell(b.Commit)
	if b.Dirty {
		commit += " (dirty)"
	}
	tw := table(inv.out)
	fmt.Fprintf(tw, "sbxdb\t%s\n", b.Version)
	fmt.Fprintf(tw, "commit\t%s\n", commit)
	fmt.Fprintf(tw, "go\t%s\n", b.Go)
	fmt.Fprintf(tw, "store format\t%d\n", b.StoreFormat)
	return tw.Flush()
}

// version names this build for /v1/health: its module version, "(devel)"
// for a build from a source tree.
func version() string { return readBuildInfo().Version }
