// Package testkit picks the scale of sbxdb's tests (how many iterations,
// how large an input, how long a run) and holds the helpers tests of
// several packages share. Only tests and the conformance kit
// (storetest) import it. A tier changes how many times, how big
// and how long, not which code paths run or what is asserted; the one test that needs a resource big by nature (a 256 MiB
// record) skips below SBXDB_LONG=1, saying so.
//
// The tiers:
//
//   - default, the README's command (go test ./...): every behaviour at a
//     smaller scale; the whole module in about 3 minutes on 2 idle cores.
//   - -short: smaller still where a test has a short scale (the kill
//     cycles skip); never larger than the default.
//   - SBXDB_LONG=1, which CI sets for go test ./...: full scale, -short
//     or not. The million-entry manifest, 100 MB conversation and 100,000
//     threads of engine/limits_test.go, the 256 MiB record (which only
//     this tier runs), 300 kill cycles (crashtest), 2,000 differential
//     sequences (memstore), a 60 s soak, both errnos at every
//     fault-injection step, a damaged-file flip every 61 bytes, and the
//     full counts of the chain, capture, gc and redaction tests. The
//     engine and crashtest packages take minutes each: on a busy machine
//     give go test a -timeout past its default 10 minutes (CI gives 30).
//   - SBXDB_LONG=2: SBXDB_LONG=1 and the cases too slow for CI's budget:
//     1,000 kill cycles (their checks grow with the cycles before them:
//     about seven times 300's time), and the damaged-file test flips
//     every byte of its database, one open of a damaged store per byte.
//     CI does not set it.
//
// Knobs of single tests override their tier: SBXDB_SOAK=d runs the soak
// for d (CI also runs it for 60 s under -race), SBXDB_CRASH_CYCLES=n runs
// n kill cycles, SBXDB_DIFF_SEQS=n runs n differential sequences.
//
// Under the race detector, which slows the code under test 5 to 10 times,
// a test may pick smaller sizes than its tier's (the engine limits and
// the kill cycles do) unless SBXDB_LONG is set.
package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
)

// envLong names the environment variable that selects the tier: unset,
// empty or 0 is the default, 1 is full scale, 2 is full scale and the
// exhaustive cases.
const envLong = "SBXDB_LONG"

// level returns the tier SBXDB_LONG selects: 0, 1 or 2. Any other value
// fails the test, so a misspelt tier never runs the default silently.
func level(tb testing.TB) int {
	tb.Helper()
	switch v := os.Getenv(envLong); v {
	case "", "0":
		return 0
	case "1":
		return 1
	case "2":
		return 2
	default:
		tb.Fatalf("%s=%q: want 0, 1 (full scale) or 2 (and the exhaustive cases)", envLong, v)
		return 0
	}
}

// Long reports SBXDB_LONG=1 or 2: full scale.
func Long(tb testing.TB) bool {
	tb.Helper()
	return level(tb) >= 1
}

// Exhaustive reports SBXDB_LONG=2: the cases too slow for CI.
func Exhaustive(tb testing.TB) bool {
	tb.Helper()
	return level(tb) >= 2
}

// Number is what a scale can be: a count, a size or a time.Duration.
type Number interface {
	~int | ~int64 | ~uint64
}

// Scale returns quick by default and under -short, and long under
// SBXDB_LONG=1 or 2.
func Scale[N Number](tb testing.TB, quick, long N) N {
	tb.Helper()
	if Long(tb) {
		return long
	}
	return quick
}

// ScaleShort is Scale for a test that also has a smaller scale for
// -short: short under -short (unless SBXDB_LONG is set), quick by default,
// long under SBXDB_LONG=1 or 2.
func ScaleShort[N Number](tb testing.TB, short, quick, long N) N {
	tb.Helper()
	if Long(tb) {
		return long
	}
	if testing.Short() {
		return short
	}
	return quick
}

// SkipUnlessLong skips the test unless SBXDB_LONG is set, saying why and
// how to run it. It is for tests that need a resource that is big by
// nature (hundreds of megabytes), not for tests that can run smaller.
func SkipUnlessLong(tb testing.TB, why string) {
	tb.Helper()
	if !Long(tb) {
		tb.Skipf("%s: runs with %s=1", why, envLong)
	}
}

// FileKey returns a well-formed file blob key made from n: the files
// prefix and n as 64 hex digits. Tests use it for keys whose bytes they
// never store.
func FileKey[N Number](n N) string {
	return fmt.Sprintf("%s%064x", chain.FilePrefix, uint64(n))
}

// FileKeyOf and ArtifactKeyOf return the content-addressed blob key of
// data: the namespace's prefix and data's SHA-256 in lowercase hex, the key
// a store gives those bytes.
func FileKeyOf[D ~string | ~[]byte](data D) string {
	return chain.FilePrefix + sha256Hex([]byte(data))
}

// ArtifactKeyOf: see FileKeyOf.
func ArtifactKeyOf[D ~string | ~[]byte](data D) string {
	return chain.ArtifactPrefix + sha256Hex([]byte(data))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SampleCheckpoint returns a new valid checkpoint holding each kind of
// entry (a file of size 0, an executable of 1 TiB, a directory, a
// symlink), an artifact and two messages, one with spacing that
// compacting changes. Files' keys are FileKey(1) and FileKey(2).
func SampleCheckpoint() *chain.Checkpoint {
	return &chain.Checkpoint{
		ID: "cp-é", ThreadID: "thread", ParentID: "parent", CreatedAt: -42,
		Reason: chain.ReasonNamed, Label: "v1", SourceRunID: "run",
		Files: []chain.Entry{
			{Path: "a.txt", Kind: chain.KindFile, BlobKey: FileKey(1), Size: 0},
			{Path: "bin/run", Kind: chain.KindFile, BlobKey: FileKey(2), Size: 1 << 40, Executable: true},
			{Path: "empty", Kind: chain.KindDir},
			{Path: "link", Kind: chain.KindSymlink, Target: "a.txt"},
		},
		Conversation: []json.RawMessage{json.RawMessage(`{"role" : "user"}`), json.RawMessage(`[]`)},
		Artifacts: []chain.Artifact{{ArtifactID: "art", Name: "n", MimeType: "text/plain",
			BlobKey: chain.ArtifactPrefix + strings.Repeat("ab", 32), Size: 3, CreatedAt: 7}},
	}
}

// FlipByte damages the file at path by XOR-ing the byte at off with 0x5a;
// a negative off counts from the end (-1 is the last byte).
func FlipByte(tb testing.TB, path string, off int64) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x5a
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}
