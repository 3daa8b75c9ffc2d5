package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
)

// maxPlanItems bounds the items of one list the gc plan shows.
const maxPlanItems = 50

// storageData is the storage page.
type storageData struct {
	Stats *sbxdb.StoreStats
	Usage sbxdb.BlobUsage
	// StoredLive is what the live blobs take: packs less their dead bytes,
	// plus large files.
	StoredLive  int64
	Compression float64 // logical bytes / StoredLive
	// Referenced is the blob bytes the checkpoints name, each blob counted
	// once per checkpoint naming it; Dedup is Referenced / the bytes of
	// the blobs referenced, each counted once.
	Referenced, Unique int64
	Dedup              float64
	DeadShare          float64
	Keep               string
	OlderThan          string
	Plan               []planRow
	PlanStatus         int
	PlanError          string
	// Chart is the blob bytes stored now, by the day of their upload.
	Chart dayChart
	// Runs are the server's last gc and sweep runs, newest first; nil
	// with RunsKept false when the UI was given no record of them.
	Runs     []GCRun
	RunsKept bool
}

// planRow is one member of the gc plan, by its JSON path.
type planRow struct{ Key, Value string }

// storage shows what the store holds and costs, and offers a gc dry run.
func (u *UI) storage(w http.ResponseWriter, r *http.Request) {
	d, err := u.storageData(r)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "storage", "Storage", "storage", d)
}

func (u *UI) storageData(r *http.Request) (*storageData, error) {
	ctx := r.Context()
	st, err := u.db.Stats(ctx)
	if err != nil {
		return nil, err
	}
	us, err := u.db.Blobs().Usage(ctx)
	if err != nil {
		return nil, err
	}
	d := &storageData{Stats: st, Usage: us, StoredLive: us.PackBytes - us.DeadBytes + us.LargeBytes, Keep: "", OlderThan: "24h"}
	if d.StoredLive > 0 {
		d.Compression = float64(us.RawBytes) / float64(d.StoredLive)
	}
	if us.PackBytes > 0 {
		d.DeadShare = float64(us.DeadBytes) / float64(us.PackBytes)
	}
	refs, err := u.db.BlobReferences(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := u.db.Blobs().List(ctx, "")
	if err != nil {
		return nil, err
	}
	d.Chart = bytesByDay(infos)
	if u.cfg.Runs != nil {
		d.Runs, d.RunsKept = u.cfg.Runs.Last(), true
	}
	for _, ref := range refs {
		i, ok := slices.BinarySearchFunc(infos, ref.Key, func(in casInfo, k string) int { return strings.Compare(in.Key, k) })
		if ok {
			d.Unique += infos[i].Size
			d.Referenced += ref.References * infos[i].Size
		}
	}
	if d.Unique > 0 {
		d.Dedup = float64(d.Referenced) / float64(d.Unique)
	}
	return d, nil
}

// gcPlan runs the API's gc as a dry run with the form's options (keep:
// retention's count, empty for none; olderThan: the sweep's window, a Go
// duration) and shows its plan under the storage figures.
func (u *UI) gcPlan(w http.ResponseWriter, r *http.Request) {
	d, err := u.storageData(r)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	d.Keep, d.OlderThan = strings.TrimSpace(r.PostFormValue("keep")), strings.TrimSpace(r.PostFormValue("olderThan"))
	req := map[string]any{}
	older, err := time.ParseDuration(d.OlderThan)
	switch {
	case err != nil || older < 0:
		d.PlanError = fmt.Sprintf("Older than %q: give a duration such as 24h or 30m.", d.OlderThan)
	case older == 0:
		req["immediate"] = true
	default:
		req["olderThanMs"] = older.Milliseconds()
	}
	if d.Keep != "" {
		n, err := strconv.Atoi(d.Keep)
		if err != nil || n < 0 {
			d.PlanError = fmt.Sprintf("Keep %q: give a count of checkpoints, 0 or more, or nothing.", d.Keep)
		}
		req["retain"], req["keep"] = true, n
	}
	if d.PlanError == "" {
		body, status := u.cfg.GCPlan(r.Context(), req)
		d.PlanStatus = status
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			d.PlanError = "The gc's answer is not JSON: " + err.Error()
		} else if status != http.StatusOK {
			d.PlanError = fmt.Sprintf("The gc refused (%d): %s", status, firstLine(string(body)))
		} else {
			flatten("", v, &d.Plan)
		}
		if u.cfg.Runs != nil { // the list with this dry run
			d.Runs = u.cfg.Runs.Last()
		}
	}
	status := http.StatusOK
	if d.PlanError != "" {
		status = http.StatusBadRequest
	}
	u.render(w, r, status, "storage", "Storage", "storage", d)
}

func firstLine(s string) string { l, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); return l }

// flatten lists the leaves of the JSON value v by their paths, lists cut
// to maxPlanItems items (and their length said): it shows any shape the
// API's gc answers with.
func flatten(path string, v any, out *[]planRow) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) == 0 {
			*out = append(*out, planRow{path, "none"})
		}
		for _, k := range keys {
			flatten(strings.TrimPrefix(path+"."+k, "."), x[k], out)
		}
	case []any:
		if len(x) == 0 {
			*out = append(*out, planRow{path, "none"})
			return
		}
		*out = append(*out, planRow{path, fmt.Sprintf("%d items", len(x))})
		for i, e := range x[:min(len(x), maxPlanItems)] {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
		if len(x) > maxPlanItems {
			*out = append(*out, planRow{path, fmt.Sprintf("… %d more", len(x)-maxPlanItems)})
		}
	case nil:
		*out = append(*out, planRow{path, "null"})
	default:
		b, _ := json.Marshal(x)
		*out = append(*out, planRow{path, string(b)})
	}
}

type casInfo = cas.Info
