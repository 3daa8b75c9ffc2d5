package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
)

// RunInstanceConformance runs the instance-store cases of SPEC §9.3 (the I
// cases) and X9: any string is a key, the empty one included (SPEC §10 Q12).
// Every subtest calls newStore for a fresh store.
func RunInstanceConformance(t *testing.T, newStore Factory) {
	runCases(t, newStore, instanceCases())
}

// baseRecord is the record of SPEC §9.3.
func baseRecord() sbxdb.InstanceRecord {
	return sbxdb.InstanceRecord{Key: "thread-1", Provider: "fake", ProviderSandboxID: "sb-1", ThreadID: "thread-1", UpdatedAt: 1}
}

func (e *env) upsert(rec sbxdb.InstanceRecord) {
	e.t.Helper()
	e.noErr(fmt.Sprintf("Upsert(%q)", rec.Key), e.s.Instances().Upsert(bg, rec))
}

// wantRecord checks Get(key): nil for want nil, else deep-equal to want
// (so an optional field left out of the last Upsert reads as absent, "").
func (e *env) wantRecord(key string, want *sbxdb.InstanceRecord) {
	e.t.Helper()
	got, err := e.s.Instances().Get(bg, key)
	e.noErr(fmt.Sprintf("Instances().Get(%q)", key), err)
	if want == nil {
		if got != nil {
			e.t.Errorf("Instances().Get(%q) = %+v, want nil", key, got)
		}
		return
	}
	if got == nil {
		e.t.Fatalf("Instances().Get(%q) = nil, want %+v", key, *want)
	}
	e.equal(fmt.Sprintf("Instances().Get(%q)", key), got, want)
}

func instanceCases() []kase {
	return []kase{
		{"I1_GetAbsent", func(e *env) { e.wantRecord("absent", nil) }},
		{"I2_UpsertWithOptionals", func(e *env) {
			rec := baseRecord()
			rec.LatestSnapshotID, rec.LatestRunID = "snap-1", "run-1"
			e.upsert(rec)
			e.wantRecord(rec.Key, &rec)
		}},
		{"I3_UpsertWithoutOptionals", func(e *env) {
			rec := baseRecord()
			e.upsert(rec)
			e.wantRecord(rec.Key, &rec)
		}},
		{"I4_UpsertReplacesRecord", func(e *env) {
			rec := baseRecord()
			rec.LatestSnapshotID, rec.LatestRunID = "snap-1", "run-1"
			e.upsert(rec)
			next := baseRecord()
			next.ProviderSandboxID, next.UpdatedAt = "sb-2", 2
			e.upsert(next)
			e.wantRecord(rec.Key, &next)
		}},
		{"I5_KeysAreIndependent", func(e *env) {
			a, b := baseRecord(), baseRecord()
			a.Key, b.Key, b.ProviderSandboxID = "a", "b", "sb-b"
			e.upsert(a)
			e.upsert(b)
			e.wantRecord("a", &a)
			e.wantRecord("b", &b)
			e.noErr("Delete(a)", e.s.Instances().Delete(bg, "a"))
			e.wantRecord("a", nil)
			e.wantRecord("b", &b)
		}},
		{"I6_DeleteRemovesRecord", func(e *env) {
			rec := baseRecord()
			e.upsert(rec)
			e.noErr("Delete", e.s.Instances().Delete(bg, rec.Key))
			e.wantRecord(rec.Key, nil)
		}},
		{"I7_DeleteAbsentIsNoOp", func(e *env) {
			e.noErr("Delete(absent)", e.s.Instances().Delete(bg, "absent"))
			e.noErr("Delete(absent) again", e.s.Instances().Delete(bg, "absent"))
			e.wantRecord("absent", nil)
		}},
		{"X9_AnyStringIsAKey", func(e *env) {
			keys := []string{"", "\x00", "\x00a", "a\x00", "a", "\xff", "\xed\xa0\x80", strings.Repeat("k", 5000)}
			for i, k := range keys {
				rec := baseRecord()
				rec.Key, rec.ProviderSandboxID = k, fmt.Sprint("sb-", i)
				e.upsert(rec)
			}
			for i, k := range keys {
				rec := baseRecord()
				rec.Key, rec.ProviderSandboxID = k, fmt.Sprint("sb-", i)
				e.wantRecord(k, &rec)
			}
			e.noErr(`Delete("")`, e.s.Instances().Delete(bg, ""))
			e.wantRecord("", nil)
			rec := baseRecord()
			rec.Key, rec.ProviderSandboxID = "\x00", "sb-1"
			e.wantRecord("\x00", &rec)
		}},
	}
}
