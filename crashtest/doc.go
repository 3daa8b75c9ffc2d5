// Package crashtest proves that sbxdb loses nothing it acknowledged when
// its process is killed. It holds only tests: a driver starts a child
// process (this package's test binary) that captures, appends, deletes,
// forks and sweeps on several goroutines and reports each operation on a
// pipe before it starts and again once it returns; the driver kills the
// child with SIGKILL at a random moment, reopens the store and checks it
// against what was acknowledged.
//
//	go test ./crashtest                          # 50 kill cycles
//	SBXDB_LONG=1 go test ./crashtest             # 300 kill cycles (CI)
//	SBXDB_LONG=2 go test -timeout 1h ./crashtest # 1,000 kill cycles
//	SBXDB_CRASH_CYCLES=200 go test ./crashtest   # any number
//	SBXDB_CRASH_SEED=42 go test ./crashtest      # replay one run
package crashtest
