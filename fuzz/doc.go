// Package fuzz holds sbxdb's fuzz targets (Go native fuzzing) for every
// input an attacker or a damaged disk can hand the engine: checkpoints and
// their JSON, operation sequences (against the in-memory reference store),
// stored records and database pages, blob frames, packs and the blob index,
// and manifests given to restore.
//
// `go test ./fuzz` runs each target's checked-in seed corpus
// (testdata/fuzz/<Target>/) as ordinary tests. To fuzz:
//
//	go test ./fuzz -run '^$' -fuzz '^FuzzJSON$' -fuzztime 10m
//	bash fuzz/run.sh 10m          # every target in turn
//
// A crasher found becomes a file under testdata/fuzz/<Target>/ (Go writes
// it there) and, with its fix, a regression seed.
package fuzz
