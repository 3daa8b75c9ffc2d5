// Package lifecycle holds what a Go host needs around a store to run
// sandboxes as TanStack AI's TypeScript hosts do: the compound instance key
// under which a host records the provider sandbox to resume (InstanceKey,
// as computeSandboxKey computes it, byte for byte, so that Go and
// TypeScript hosts sharing an instance store agree), and the janitor's
// chores: deleting threads idle past an age (DeleteIdleThreads). It imports
// only the contract (package sbxdb) and chain: it runs the same over an
// embedded engine.DB and a client.Client.
package lifecycle

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Tenant scopes an instance key to a user and an organisation; a nil field
// is absent from the key's material, as an unset property is in
// TypeScript.
type Tenant struct {
	UserID *string
	OrgID  *string
}

// KeyInput is what identifies one resumable sandbox instance: a change of
// any of it (thread, sandbox definition id, provider, anything in the
// workspace definition but its secrets, tenant) makes another key, so a
// host creates a fresh sandbox rather than resuming the wrong one.
type KeyInput struct {
	ThreadID     string
	SandboxID    string
	ProviderName string
	// Workspace is the workspace definition as JSON decodes it (objects
	// as map[string]any, arrays as []any, numbers as float64 or
	// json.Number), or nil for none.
	Workspace map[string]any
	// Tenant is nil for none.
	Tenant *Tenant
}

// InstanceKey returns the compound key of in: 16 lowercase hex digits, the
// hash of the canonical JSON of {threadId, sandboxId, providerName,
// workspaceHash, tenant}, as TanStack AI's computeSandboxKey gives it
// (docs/SPEC.md §8). A host that wants a fresh sandbox per run (reuse
// "none") passes "<threadId>:<runId>" as ThreadID. The error is a
// workspace holding a value JSON cannot encode.
func InstanceKey(in KeyInput) (string, error) {
	var tenant any // null
	if in.Tenant != nil {
		t := map[string]any{}
		if in.Tenant.UserID != nil {
			t["userId"] = *in.Tenant.UserID
		}
		if in.Tenant.OrgID != nil {
			t["orgId"] = *in.Tenant.OrgID
		}
		tenant = t
	}
	ws, err := WorkspaceHash(in.Workspace)
	if err != nil {
		return "", err
	}
	material, err := canonical(map[string]any{
		"threadId":      in.ThreadID,
		"sandboxId":     in.SandboxID,
		"providerName":  in.ProviderName,
		"workspaceHash": ws,
		"tenant":        tenant,
	})
	return hash(material), err
}

// WorkspaceHash is the hash of what a workspace definition changes for
// the agent: everything but its secrets and a git source's auth token, so
// rotating a secret keeps the key. A nil workspace hashes "no-workspace".
func WorkspaceHash(ws map[string]any) (string, error) {
	if ws == nil {
		return hash("no-workspace"), nil
	}
	rest := make(map[string]any, len(ws))
	for k, v := range ws {
		if k != "secrets" {
			rest[k] = v
		}
	}
	if src, ok := rest["source"].(map[string]any); ok && src["type"] == "git" && truthy(src["auth"]) {
		if auth, ok := src["auth"].(map[string]any); ok {
			noToken := make(map[string]any, len(auth))
			for k, v := range auth {
				if k != "token" {
					noToken[k] = v
				}
			}
			s := make(map[string]any, len(src))
			for k, v := range src {
				s[k] = v
			}
			s["auth"] = noToken
			rest["source"] = s
		}
	}
	material, err := canonical(rest)
	return hash(material), err
}

// truthy is JavaScript's truthiness of a JSON value.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case float64:
		return v != 0 && !math.IsNaN(v)
	case json.Number:
		f, err := v.Float64()
		return err != nil || f != 0
	}
	return true // objects and arrays
}

// hash is the key's hash: two 32-bit FNV-1a lanes over the UTF-16 code
// units of s, the first folding each unit's low byte and the second its
// high byte, printed as 8 hex digits each.
func hash(s string) string {
	h1, h2 := uint32(0x811c9dc5), uint32(0x811c9dc5)
	for _, c := range utf16.Encode([]rune(s)) {
		h1 = (h1 ^ uint32(c&0xff)) * 0x01000193
		h2 = (h2 ^ uint32(c>>8)) * 0x01000193
	}
	return fmt.Sprintf("%08x%08x", h1, h2)
}

// canonical is the key-sorted JSON of v as TypeScript's JSON.stringify
// writes its parts: object keys in UTF-16 code unit order, no spaces,
// JavaScript's number and string forms. A value that is not what JSON
// decoding makes (a struct, a typed map or slice) is encoded and decoded
// first; one JSON cannot encode is the error.
func canonical(v any) (string, error) {
	var b strings.Builder
	err := writeCanonical(&b, v)
	return b.String(), err
}

func writeCanonical(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case string:
		writeJSString(b, v)
	case float64:
		b.WriteString(jsNumber(v))
	case int:
		b.WriteString(jsNumber(float64(v)))
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return fmt.Errorf("lifecycle: number %q: %w", v, err)
		}
		b.WriteString(jsNumber(f))
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSString(b, k)
			b.WriteByte(':')
			if err := writeCanonical(b, v[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("lifecycle: a workspace value of type %T: %w", v, err)
		}
		var decoded any
		d := json.NewDecoder(strings.NewReader(string(j)))
		d.UseNumber()
		if err := d.Decode(&decoded); err != nil {
			return fmt.Errorf("lifecycle: a workspace value of type %T: %w", v, err)
		}
		return writeCanonical(b, decoded)
	}
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as JavaScript's
// default sort does.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// writeJSString writes s as JSON.stringify does: '"' and '\' escaped, the
// control characters as \b \f \n \r \t or \u00xx, everything else as is.
func writeJSString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// jsNumber formats f as JavaScript's Number.prototype.toString does (and
// JSON.stringify: "null" for NaN and the infinities): the shortest digits
// that read back as f, without an exponent from 1e-6 to below 1e21.
func jsNumber(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "null"
	case f == 0:
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// d.ddde±x: the shortest digits and the exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k, n := len(digits), x+1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	out := digits[:1]
	if k > 1 {
		out += "." + digits[1:]
	}
	es := "+"
	if n-1 < 0 {
		es = "-"
	}
	return sign + out + "e" + es + strconv.Itoa(abs(n-1))
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
