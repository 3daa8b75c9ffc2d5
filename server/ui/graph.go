package ui

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sbxdb/sbxdb/chain"
)

// Geometry of the history graph, in SVG user units.
const (
	rowHeight  = 36
	laneWidth  = 26
	graphTop   = 24
	graphLeft  = 20
	forkWidth  = 190
	nodeRadius = 8
)

// maxForkScan bounds the other threads the graph looks at for forks.
const maxForkScan = 2000

// gNode is one drawn node: a checkpoint of the thread, or a checkpoint of
// another thread that a fork edge joins.
type gNode struct {
	X, Y        int
	Href, Label string // the link and its accessible name
	Class       string // "node …"
	Title       string // first line of text
	Sub         string // second line
	Fork        bool   // of another thread: drawn as a box
	TextX       int
}

// gEdge is a line from one node to another.
type gEdge struct {
	D     string // SVG path data
	Class string
}

// graphData is the thread page.
type graphData struct {
	Thread       string
	Head         string
	Count        int
	Width        int
	Height       int
	Nodes        []gNode
	Edges        []gEdge
	Checkpoints  []*chain.Checkpoint
	ForksIn      []forkLink
	ForksOut     []forkLink
	ForkScanNote string
}

// forkLink is a fork between a checkpoint of this thread and one of
// another: From was copied as the root To.
type forkLink struct{ From, To *chain.Checkpoint }

// thread draws ?id's history: every checkpoint in time order, one row
// each, parent edges, the head marked, and forks to and from other
// threads. The store records no fork's source (a fork root has no
// parent), so forks are inferred: a fork-root checkpoint whose files,
// conversation and artifacts equal those of a checkpoint of another thread
// made no later is drawn as forked from it (a fork copies exactly these).
// The search reads the roots of at most maxForkScan other threads.
func (u *UI) thread(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("id")
	if err := chain.CheckID("threadId", id); err != nil {
		u.failErr(w, r, err)
		return
	}
	cps, err := u.db.List(ctx, id)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	if len(cps) == 0 {
		u.fail(w, r, http.StatusNotFound, "The thread "+id+" has no checkpoints.")
		return
	}
	head, err := u.db.Head(ctx, id)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	in, out, note, err := u.forks(ctx, id, cps)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	d := layout(id, head, cps, in, out)
	d.ForkScanNote = note
	u.render(w, r, http.StatusOK, "thread", "Thread "+id, "threads", d)
}

// fingerprint is the digest of what a fork copies: files, conversation
// and artifacts.
func fingerprint(cp *chain.Checkpoint) [32]byte {
	b, _ := json.Marshal(struct {
		F []chain.Entry
		C []json.RawMessage
		A []chain.Artifact
	}{cp.Files, cp.Conversation, cp.Artifacts})
	return sha256.Sum256(b)
}

// forks finds the forks into the thread (its fork-root checkpoints, and
// their sources elsewhere) and out of it (fork roots of other threads
// copied from its checkpoints). note says when the search was cut short.
func (u *UI) forks(ctx context.Context, thread string, cps []*chain.Checkpoint) (in, out []forkLink, note string, err error) {
	ours := map[[32]byte][]*chain.Checkpoint{}
	var roots []*chain.Checkpoint // our fork roots
	for _, cp := range cps {
		fp := fingerprint(cp)
		ours[fp] = append(ours[fp], cp)
		if cp.Reason == chain.ReasonForkRoot && cp.ParentID == "" {
			roots = append(roots, cp)
		}
	}
	rootFP := map[[32]byte][]*chain.Checkpoint{}
	for _, cp := range roots {
		rootFP[fingerprint(cp)] = append(rootFP[fingerprint(cp)], cp)
	}
	threads, err := u.db.Threads(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	scanned := 0
	for _, t := range threads {
		if t == thread {
			continue
		}
		if scanned == maxForkScan {
			note = fmt.Sprintf("Forks were searched among the first %d other threads of %d.", maxForkScan, len(threads)-1)
			break
		}
		scanned++
		first := true
		for cp, err := range u.db.ListIter(ctx, t) {
			if err != nil {
				return nil, nil, "", err
			}
			fp := fingerprint(cp)
			if first && cp.Reason == chain.ReasonForkRoot && cp.ParentID == "" {
				for _, src := range ours[fp] {
					if src.CreatedAt <= cp.CreatedAt {
						out = append(out, forkLink{From: src, To: cp})
						break
					}
				}
			}
			first = false
			if len(roots) == 0 {
				break // only the roots of other threads matter
			}
			for _, root := range rootFP[fp] {
				if cp.CreatedAt <= root.CreatedAt && !hasFork(in, root) {
					in = append(in, forkLink{From: cp, To: root})
				}
			}
		}
	}
	return in, out, note, nil
}

func hasFork(l []forkLink, to *chain.Checkpoint) bool {
	for _, f := range l {
		if f.To == to {
			return true
		}
	}
	return false
}

// layout places the checkpoints one row each in time order, the head
// chain in the first lane and every other branch in a lane of its own,
// the sources of forks in above their roots' rows, and the fork roots
// copied from a checkpoint at the right of its row.
func layout(thread, head string, cps []*chain.Checkpoint, in, out []forkLink) graphData {
	byID := map[string]*chain.Checkpoint{}
	for _, cp := range cps {
		byID[cp.ID] = cp
	}
	lane := map[string]int{}
	claimed := map[string]bool{} // a parent whose lane a child continues
	for id := head; id != ""; {
		cp, ok := byID[id]
		if _, seen := lane[id]; !ok || seen {
			break
		}
		lane[id] = 0
		claimed[cp.ParentID] = true
		id = cp.ParentID
	}
	onHead := func(id string) bool { _, ok := lane[id]; return ok }
	lanes := 1
	for _, cp := range cps {
		if onHead(cp.ID) {
			continue
		}
		if p, ok := lane[cp.ParentID]; ok && !claimed[cp.ParentID] {
			lane[cp.ID] = p
		} else {
			lane[cp.ID] = lanes
			lanes++
		}
		claimed[cp.ParentID] = true
	}
	rowOf := map[string]int{}
	offset := 0
	if len(in) > 0 {
		offset = 1 // a row above for the sources of forks in
	}
	for i, cp := range cps {
		rowOf[cp.ID] = i + offset
	}
	textX := graphLeft + lanes*laneWidth + 4
	d := graphData{Thread: thread, Head: head, Count: len(cps), Checkpoints: cps, ForksIn: in, ForksOut: out}
	xy := func(id string) (int, int) {
		return graphLeft + lane[id]*laneWidth, graphTop + rowOf[id]*rowHeight
	}
	forkX := textX + 380
	for _, cp := range cps {
		if _, ok := byID[cp.ParentID]; !ok {
			continue
		}
		x1, y1 := xy(cp.ParentID)
		x2, y2 := xy(cp.ID)
		d.Edges = append(d.Edges, gEdge{D: curve(x1, y1, x2, y2), Class: "edge"})
	}
	for i, f := range in {
		x, y := graphLeft+i*(forkWidth+10)+forkWidth/2, graphTop
		tx, ty := xy(f.To.ID)
		d.Edges = append(d.Edges, gEdge{D: curve(x, y+10, tx, ty), Class: "edge fork fork-in"})
		d.Nodes = append(d.Nodes, forkNode(x-forkWidth/2, y, "from "+f.From.ThreadID, f.From))
	}
	for i, f := range out {
		fx, fy := xy(f.From.ID)
		x := forkX + (i%2)*(forkWidth+10)
		d.Edges = append(d.Edges, gEdge{D: fmt.Sprintf("M%d %d H%d", fx, fy, x), Class: "edge fork fork-out"})
		d.Nodes = append(d.Nodes, forkNode(x, fy, "to "+f.To.ThreadID, f.To))
	}
	for _, cp := range cps {
		x, y := xy(cp.ID)
		class := "node cp reason-" + string(cp.Reason)
		switch cp.Reason {
		case chain.ReasonNamed:
			class += " named"
		case chain.ReasonForkRoot:
			class += " fork-root"
		}
		title := shortID(cp.ID)
		label := "checkpoint " + cp.ID + ", " + string(cp.Reason)
		if cp.ID == head {
			class += " head"
			title += " (head)"
			label += ", head"
		}
		sub := msTime(cp.CreatedAt) + " · " + string(cp.Reason)
		if cp.Label != "" {
			sub += " · " + shortLabel(cp.Label)
			label += ", label " + cp.Label
		}
		d.Nodes = append(d.Nodes, gNode{X: x, Y: y, Href: "/ui/checkpoint?id=" + url.QueryEscape(cp.ID), Label: label,
			Class: class, Title: title, Sub: sub, TextX: textX})
	}
	d.Width = forkX + 2*(forkWidth+10) + 10
	d.Height = graphTop + (len(cps)+offset)*rowHeight
	return d
}

// forkNode is the box of a checkpoint of another thread, with its left
// edge at x and its middle at y.
func forkNode(x, y int, title string, cp *chain.Checkpoint) gNode {
	return gNode{X: x, Y: y - 12, Href: "/ui/thread?id=" + url.QueryEscape(cp.ThreadID), Fork: true,
		Label: "fork " + title + ", checkpoint " + cp.ID, Class: "node fork-node", Title: shortLabel(title), Sub: shortID(cp.ID), TextX: x + 8}
}

// curve is a path from (x1, y1) to (x2, y2): straight in one lane, else a
// bend.
func curve(x1, y1, x2, y2 int) string {
	if x1 == x2 {
		return fmt.Sprintf("M%d %d V%d", x1, y1, y2)
	}
	my := (y1 + y2) / 2
	return fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, x1, my, x2, my, x2, y2)
}

// shortLabel is s cut to 40 runes.
func shortLabel(s string) string {
	r := []rune(s)
	if len(r) <= 40 {
		return s
	}
	return string(r[:39]) + "…"
}
