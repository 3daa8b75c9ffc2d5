package ui

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/sbxdb/sbxdb/chain"
)

// maxDiffBytes bounds each side of a text diff; larger files are only
// said to differ.
const maxDiffBytes = 1 << 20

// diffContext is the unchanged lines shown around each change.
const diffContext = 3

// change is one path that differs between two checkpoints.
type change struct {
	Path   string
	Kind   string // added, removed or changed
	A, B   *chain.Entry
	Note   string // why no line diff is shown, or what changed besides bytes
	Hunks  []hunk
	Binary bool
}

// hunk is a run of diff lines.
type hunk struct {
	Header string
	Lines  []dline
}

// dline is one line of a diff: "add", "del" or "ctx", with its numbers in
// the old and new file (0: none).
type dline struct {
	Class  string
	Old    int
	New    int
	Prefix string
	Text   string
}

// diff compares checkpoint ?a with ?b: ?b alone compares it with its
// parent. It lists the paths added, removed and changed, and a unified
// diff with context for each changed text file.
func (u *UI) diff(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("b") == "" {
		u.render(w, r, http.StatusOK, "diff", "Diff", "threads", struct {
			A, B    *chain.Checkpoint
			QA, QB  string
			Changes []change
		}{QA: q.Get("a")})
		return
	}
	b := u.getCheckpoint(w, r, "b")
	if b == nil {
		return
	}
	var a *chain.Checkpoint
	if q.Get("a") == "" && b.ParentID != "" {
		q.Set("a", b.ParentID)
		r.URL.RawQuery = q.Encode()
	}
	if q.Get("a") != "" {
		if a = u.getCheckpoint(w, r, "a"); a == nil {
			return
		}
	} else {
		a = &chain.Checkpoint{} // a root: everything is added
	}
	changes, err := u.changes(r.Context(), a, b)
	if err != nil {
		u.failErr(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "diff", "Diff "+a.ID+" → "+b.ID, "threads", struct {
		A, B    *chain.Checkpoint
		QA, QB  string
		Changes []change
	}{a, b, a.ID, b.ID, changes})
}

// changes lists what differs from a's manifest to b's, by path.
func (u *UI) changes(ctx context.Context, a, b *chain.Checkpoint) ([]change, error) {
	old := map[string]*chain.Entry{}
	for i := range a.Files {
		old[a.Files[i].Path] = &a.Files[i]
	}
	var out []change
	for i := range b.Files {
		nb := &b.Files[i]
		na, ok := old[nb.Path]
		delete(old, nb.Path)
		switch {
		case !ok:
			out = append(out, change{Path: nb.Path, Kind: "added", B: nb})
		case *na != *nb:
			c := change{Path: nb.Path, Kind: "changed", A: na, B: nb}
			if err := u.lineDiff(ctx, &c); err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	for _, e := range old {
		out = append(out, change{Path: e.Path, Kind: "removed", A: e})
	}
	slices.SortFunc(out, func(x, y change) int { return strings.Compare(x.Path, y.Path) })
	return out, nil
}

// lineDiff fills c's hunks when both sides are text files, or says why
// not.
func (u *UI) lineDiff(ctx context.Context, c *change) error {
	a, b := c.A, c.B
	switch {
	case a.Kind != b.Kind:
		c.Note = fmt.Sprintf("was a %s, is a %s", a.Kind, b.Kind)
		return nil
	case a.Kind == chain.KindSymlink:
		c.Note = fmt.Sprintf("target %q → %q", a.Target, b.Target)
		return nil
	case a.BlobKey == b.BlobKey:
		c.Note = fmt.Sprintf("executable %v → %v", a.Executable, b.Executable)
		return nil
	case a.Size > maxDiffBytes || b.Size > maxDiffBytes:
		c.Note = fmt.Sprintf("%d → %d bytes; too large to compare line by line", a.Size, b.Size)
		return nil
	}
	var text [2]string
	for i, e := range []*chain.Entry{a, b} {
		rc, err := u.db.OpenEntry(ctx, e)
		if err != nil {
			return err
		}
		var sb strings.Builder
		_, err = copyAll(&sb, rc)
		rc.Close()
		if err != nil {
			return err
		}
		if !isText([]byte(sb.String())) {
			c.Binary = true
			c.Note = fmt.Sprintf("binary files differ: %d → %d bytes", a.Size, b.Size)
			return nil
		}
		text[i] = sb.String()
	}
	d, err := udiff.ToUnifiedDiff("a/"+c.Path, "b/"+c.Path, text[0], udiff.Lines(text[0], text[1]), diffContext)
	if err != nil {
		return err
	}
	for _, h := range d.Hunks {
		oldN, newN := h.FromLine, h.ToLine
		var dh hunk
		var dels, adds, ctxs int
		for _, l := range h.Lines {
			line := dline{Text: strings.TrimSuffix(l.Content, "\n")}
			switch l.Kind {
			case udiff.Delete:
				line.Class, line.Prefix, line.Old = "del", "-", oldN
				oldN++
				dels++
			case udiff.Insert:
				line.Class, line.Prefix, line.New = "add", "+", newN
				newN++
				adds++
			default:
				line.Class, line.Prefix, line.Old, line.New = "ctx", " ", oldN, newN
				oldN++
				newN++
				ctxs++
			}
			dh.Lines = append(dh.Lines, line)
		}
		dh.Header = fmt.Sprintf("@@ -%d,%d +%d,%d @@", h.FromLine, dels+ctxs, h.ToLine, adds+ctxs)
		c.Hunks = append(c.Hunks, dh)
	}
	return nil
}
