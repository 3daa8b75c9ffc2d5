package main

// target is one of the performance targets the report ends with: a figure
// taken from a row (from its values, or from its ratio to another row,
// run by run) and checked on the median.
type target struct {
	id, name string
	row      string // the row the figure comes from
	to       string // if set, the figure is row's ratio to this row
	unit     string // the row's unit, or "x" for a ratio
	op       string
	value    float64
}

// targets are the engine's performance targets, in order.
var targets = []target{
	{"target.1.capture_wall", "1. first capture ÷ tar | zstd -1 -T0, wall", "capture.first.sbxdb", "capture.first.tar", "x", "<=", 1},
	{"target.1.capture_cpu", "1. first capture CPU ÷ tar | zstd -1 -T0 CPU", "capture.first.sbxdb.cpu", "capture.first.tar.cpu", "x", "<=", 1.5},
	{"target.2.unchanged_walk", "2. unchanged capture ÷ walk floor, in process", "capture.unchanged.sbxdb", "walk.parallel", "x", "<=", 2},
	{"target.2.edit_walk", "2. 1 %-edit capture ÷ walk floor, in process", "capture.edit.sbxdb", "walk.parallel", "x", "<=", 2},
	{"target.2.unchanged_cli", "2. `sbxdb capture`, unchanged ÷ git add -A && git commit", "capture.unchanged.cli", "capture.unchanged.cli_git", "x", "<=", 0.5},
	{"target.2.edit_cli", "2. `sbxdb capture`, 1 % edit ÷ git add -A && git commit", "capture.edit.cli", "capture.edit.git", "x", "<=", 0.5},
	{"target.3.open_1gb", "3. Open + Close of the largest store", "open.1gb", "", "ms", "<=", 10},
	{"target.3.open_ratio", "3. Open of the largest store ÷ Open of the 16 MB store", "open.1gb", "open.16mb", "x", "<=", 2},
	{"target.4.capture_rss", "4. peak RSS of a first capture", "child.capture.rss", "", "MiB", "<=", 100},
	{"target.4.restore_rss", "4. peak RSS of a restore", "child.restore.rss", "", "MiB", "<=", 100},
	{"target.5.size", "5. stored bytes ÷ restic's, after the first capture", "size.sbxdb", "size.restic", "x", "<=", 1},
	{"target.5.size_recompressed", "5. stored bytes ÷ restic's, after gc recompression", "size.sbxdb.recompressed", "size.restic", "x", "<=", 1},
	{"target.6.restore", "6. restore ÷ zstd -d | tar -x", "restore.sbxdb", "restore.tar", "x", "<=", 1},
	{"target.7.w64", "7. 64 writers ÷ serial appends", "core.append.w64", "core.append.serial", "x", ">=", 2.5},
	{"target.7.sweep", "7. sweep deleting 10 %: write lock per 1M references", "gc.sweep.10pct.lock_ms_per_1m_refs", "", "ms", "<=", 300},
}

// addTargets appends the targets section: one row per target, holding the
// figure run by run, or a missing row that says why there is none (a
// section not run, a peer not installed, a feature not available).
func addTargets(rep *Report) {
	rep.setSection("Targets (each checked on the median of its figure, run by run)")
	for _, t := range targets {
		src := rep.byID[t.row]
		var values []float64
		why := ""
		switch {
		case src == nil:
			why = "not measured: " + t.row + " was not run"
		case src.Missing != "":
			why = src.Missing
		case t.to == "":
			values = src.Values
		default:
			to := rep.byID[t.to]
			for _, q := range src.Ratios {
				if q.To == t.to {
					values = q.Values
				}
			}
			switch {
			case to == nil:
				why = "not measured: " + t.to + " was not run"
			case to.Missing != "":
				why = to.Missing
			case values == nil:
				if q := rep.ratio(src, t.to, "÷ "+t.to); q != nil {
					values = q.Values
				} else {
					why = "not measured: no figure"
				}
			}
		}
		if why != "" {
			rep.missing(t.id, t.name, t.unit, why)
			continue
		}
		rep.add(t.id, t.name, t.unit, values, "from "+t.row).want(t.op, t.value)
	}
}
