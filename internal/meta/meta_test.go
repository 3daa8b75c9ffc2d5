package meta

import (
	"encoding/json"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// sample returns a valid checkpoint holding each kind of entry, an artifact
// and two messages.
func sample() *chain.Checkpoint {
	return &chain.Checkpoint{
		ID: "cp-é", ThreadID: "thread", ParentID: "parent", CreatedAt: -42,
		Reason: chain.ReasonNamed, Label: "v1", SourceRunID: "run",
		Files: []chain.Entry{
			{Path: "a.txt", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 0},
			{Path: "bin/run", Kind: chain.KindFile, BlobKey: testkit.FileKey(2), Size: 1 << 40, Executable: true},
			{Path: "empty", Kind: chain.KindDir},
			{Path: "link", Kind: chain.KindSymlink, Target: "a.txt"},
		},
		Conversation: []json.RawMessage{json.RawMessage(`{"role" : "user"}`), json.RawMessage(`[]`)},
		Artifacts: []chain.Artifact{{ArtifactID: "art", Name: "n", MimeType: "text/plain",
			BlobKey: chain.ArtifactPrefix + strings.Repeat("ab", 32), Size: 3, CreatedAt: 7}},
	}
}
