package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/bench/suite"
)

// serveBench measures the cost of the API: durable appends at 1, 8 and 64
// concurrent clients over a unix socket against the same appends in
// process, and blob PUT and GET of 1 MiB and 64 MiB over the socket
// against in process. Each run runs every benchmark once, back to back, in
// an order rotated by one each run, each on a fresh store, so each ratio
// compares figures taken seconds apart.
func serveBench(rep *Report, cfg *config) error {
	suite.KeepDir = filepath.Join(cfg.work, "serve")
	if err := os.MkdirAll(suite.KeepDir, 0o755); err != nil {
		return err
	}
	var benches []bench
	for _, n := range []int{1, 8, 64} {
		benches = append(benches,
			bench{fmt.Sprintf("local%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) }},
			bench{fmt.Sprintf("served%d", n), func(b *testing.B) { suite.AppendServed(b, n) }})
	}
	for _, mib := range []int{1, 64} {
		for _, served := range []bool{false, true} {
			where := "local"
			if served {
				where = "served"
			}
			benches = append(benches,
				bench{fmt.Sprintf("put%d.%s", mib, where), func(b *testing.B) { suite.BlobPut(b, mib<<20, served) }},
				bench{fmt.Sprintf("get%d.%s", mib, where), func(b *testing.B) { suite.BlobGet(b, mib<<20, served) }})
		}
	}
	results, err := rotated(cfg, "serve", benches)
	if err != nil {
		return err
	}
	appends := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra["appends/s"])
		}
		return v
	}
	mbps := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, float64(r.Bytes)*float64(r.N)/r.T.Seconds()/1e6)
		}
		return v
	}

	rep.setSection(fmt.Sprintf("sbxdb serve: the API over a unix socket against the engine in process, fsync on, %s per benchmark and run", cfg.benchtime))
	for _, n := range []int{1, 8, 64} {
		local := rep.add(fmt.Sprintf("serve.append.local%d", n), fmt.Sprintf("Append in process, %d writer%s", n, plural(n)), "appends/s", appends(fmt.Sprintf("local%d", n)), "")
		served := rep.add(fmt.Sprintf("serve.append.served%d", n), fmt.Sprintf("Append through the socket, %d client%s", n, plural(n)), "appends/s", appends(fmt.Sprintf("served%d", n)), "one HTTP request per append")
		x := rep.ratio(served, local.ID, "÷ in process")
		if n == 64 {
			x.want(">=", 0.7)
		}
	}
	for _, mib := range []int{1, 64} {
		for _, op := range []string{"put", "get"} {
			what := map[string]string{"put": "PUT (new blob, durable)", "get": "GET (whole blob, verified)"}[op]
			local := rep.add(fmt.Sprintf("serve.%s%d.local", op, mib), fmt.Sprintf("%d MiB %s in process", mib, what), "MB/s", mbps(fmt.Sprintf("%s%d.local", op, mib)), "")
			served := rep.add(fmt.Sprintf("serve.%s%d.served", op, mib), fmt.Sprintf("%d MiB %s through the socket", mib, what), "MB/s", mbps(fmt.Sprintf("%s%d.served", op, mib)), "")
			rep.ratio(served, local.ID, "÷ in process").want(">=", 0.7)
		}
	}
	return nil
}

// cliServedBench times `sbxdb capture` (first capture, fresh store) and
// `sbxdb restore` of the benchmark tree as whole processes, each run once
// on the files and once with `sbxdb serve` running on the store (started
// and stopped outside the timing), alternating which goes first. Through a
// server the CLI sends the directory's path and the server reads and writes
// the files, so the ratio is the cost of the round trips and of the
// server's process, not of moving bytes over the socket.
func cliServedBench(rep *Report, cfg *config, tree, cli string) error {
	var local, served, localRestore, servedRestore []float64
	for i := range cfg.runs {
		progress("CLI with and without a server, run %d of %d", i+1, cfg.runs)
		for j := range 2 {
			withServer := (i+j)%2 == 1
			store := filepath.Join(cfg.work, fmt.Sprintf("cli-store-%d-%v", i, withServer))
			var stop func() error
			if withServer {
				var err error
				if stop, err = startServe(cli, store); err != nil {
					return err
				}
			}
			settle()
			capture, err := timeCommand(cli, "capture", tree, "--thread", "cli", "--no-default-excludes", "--db", store)
			if err != nil {
				return err
			}
			settle()
			restore, err := timeCommand(cli, "restore", "--thread", "cli", "--no-default-excludes", filepath.Join(store+"-restored"), "--db", store)
			if err != nil {
				return err
			}
			if stop != nil {
				if err := stop(); err != nil {
					return err
				}
				served, servedRestore = append(served, capture), append(servedRestore, restore)
			} else {
				local, localRestore = append(local, capture), append(localRestore, restore)
			}
		}
	}
	rep.setSection("sbxdb CLI with `sbxdb serve` running on the store, against without (whole processes, fresh store, fsync on)")
	l := rep.add("serve.cli.capture.local", "sbxdb capture, first capture, no server", "s", local, "")
	s := rep.add("serve.cli.capture.served", "sbxdb capture, first capture, through the server", "s", served, "the server reads the files")
	rep.ratio(s, l.ID, "÷ no server").want("<=", 1.2)
	l = rep.add("serve.cli.restore.local", "sbxdb restore of that checkpoint, no server", "s", localRestore, "")
	s = rep.add("serve.cli.restore.served", "sbxdb restore of that checkpoint, through the server", "s", servedRestore, "the server writes the files")
	rep.ratio(s, l.ID, "÷ no server").want("<=", 1.2)
	return nil
}

// timeCommand runs the command and returns its wall time in seconds.
func timeCommand(name string, args ...string) (float64, error) {
	t := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return time.Since(t).Seconds(), nil
}

// startServe starts `sbxdb serve` on store and waits until its socket
// answers; stop sends SIGTERM and waits for it to exit.
func startServe(cli, store string) (stop func() error, err error) {
	cmd := exec.Command(cli, "serve", "--db", store)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sock := filepath.Join(store, "sbxdb.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("sbxdb serve on %s did not listen within 30 s: %s", store, logs.String())
		}
	}
	return func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("sbxdb serve on %s: %v: %s", store, err, logs.String())
		}
		return nil
	}, nil
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
