package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/lease"
)

// threadsPerPage is how many threads a page of the thread list shows.
const threadsPerPage = 50

// threadRow is one thread of the list.
type threadRow struct {
	Name        string
	Checkpoints int
	Latest      *int64 // epoch ms; nil without checkpoints
	Lease       string // "" when never leased
	LeaseLive   bool
}

// threads lists the threads whose names contain ?q (case-insensitively),
// ?page by ?page, threadsPerPage at a time. Its cost is the thread names
// (one index scan), the lease table, and one ThreadSummary (the thread's
// index keys, no checkpoint decoded) per thread shown: 100,000 threads
// cost a list of names, not a read of every checkpoint.
func (u *UI) threads(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	pageNo, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pageNo = max(pageNo, 1)
	names, err := u.db.Threads(ctx)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	total := len(names)
	if q != "" {
		lq := strings.ToLower(q)
		kept := names[:0]
		for _, n := range names {
			if strings.Contains(strings.ToLower(n), lq) {
				kept = append(kept, n)
			}
		}
		names = kept
	}
	pages := max(1, (len(names)+threadsPerPage-1)/threadsPerPage)
	pageNo = min(pageNo, pages)
	shown := names[min(len(names), (pageNo-1)*threadsPerPage):min(len(names), pageNo*threadsPerPage)]
	writers, err := u.db.Writers(ctx)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	now := time.Now().UnixMilli()
	rows := make([]threadRow, 0, len(shown))
	for _, n := range shown {
		s, err := u.db.ThreadSummary(ctx, n)
		if err != nil {
			u.failErr(w, r, err)
			return
		}
		row := threadRow{Name: n, Checkpoints: s.Checkpoints, Latest: s.LatestCreatedAt}
		if st, ok := writers[n]; ok && st.Held {
			row.Lease, row.LeaseLive = holder(st), st.Live(now)
		}
		rows = append(rows, row)
	}
	link := func(p int) string {
		v := url.Values{"page": {strconv.Itoa(p)}}
		if q != "" {
			v.Set("q", q)
		}
		return "/ui/?" + v.Encode()
	}
	data := struct {
		Q                     string
		Rows                  []threadRow
		Matched, Total        int
		Page, Pages           int
		PrevLink, NextLink    string
		FirstShown, LastShown int
	}{Q: q, Rows: rows, Matched: len(names), Total: total, Page: pageNo, Pages: pages,
		FirstShown: (pageNo-1)*threadsPerPage + 1, LastShown: (pageNo-1)*threadsPerPage + len(rows)}
	if pageNo > 1 {
		data.PrevLink = link(pageNo - 1)
	}
	if pageNo < pages {
		data.NextLink = link(pageNo + 1)
	}
	u.render(w, r, http.StatusOK, "threads", "Threads", "threads", data)
}

// holder names the process holding a writer lease: host and pid, when the
// lease recorded them.
func holder(st lease.State) string {
	h := st.Holder
	switch {
	case h.PID != 0 && h.Host != "":
		return h.Host + " pid " + strconv.Itoa(h.PID)
	case h.PID != 0:
		return "pid " + strconv.Itoa(h.PID)
	case h.Host != "":
		return h.Host
	}
	return "fence " + strconv.FormatUint(st.Fence, 10)
}
