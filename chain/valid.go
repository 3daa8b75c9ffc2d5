package chain

// validJSON reports whether b is one JSON value with optional whitespace
// around it, exactly as encoding/json's Valid does (the differential tests
// hold it to that): RFC 8259's grammar, strings checked for control bytes
// and escapes but not for UTF-8, and at most maxDepth nested arrays and
// objects. It reads each byte once, with no work per byte beyond a table
// lookup inside strings, several times faster than json.Valid.
func validJSON(b []byte) bool {
	v := validator{b: b}
	v.space()
	if !v.value() {
		return false
	}
	v.space()
	return v.i == len(b)
}

// maxDepth is encoding/json's limit on nesting (maxNestingDepth).
const maxDepth = 10000

// stringStop marks the bytes that end a run of plain string bytes: a
// quote, a backslash and the control bytes, which a string may not hold.
var stringStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

type validator struct {
	b []byte
	i int
	// stack holds the open containers, innermost last: true for an object.
	stack []bool
}

func (v *validator) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

// value reads one value; containers are read without recursion, their
// nesting kept in v.stack.
func (v *validator) value() bool {
	for {
		// A value starts here.
		if v.i >= len(v.b) {
			return false
		}
		switch c := v.b[v.i]; {
		case c == '{' || c == '[':
			if len(v.stack) == maxDepth {
				return false
			}
			v.i++
			v.space()
			if v.i >= len(v.b) {
				return false
			}
			if c == '{' {
				if v.b[v.i] == '}' {
					v.i++
					break // an empty object: a value read
				}
				v.stack = append(v.stack, true)
				if !v.key() {
					return false
				}
				continue
			}
			if v.b[v.i] == ']' {
				v.i++
				break // an empty array: a value read
			}
			v.stack = append(v.stack, false)
			continue
		case c == '"':
			if !v.str() {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if !v.number() {
				return false
			}
		case c == 't':
			if !v.literal("true") {
				return false
			}
		case c == 'f':
			if !v.literal("false") {
				return false
			}
		case c == 'n':
			if !v.literal("null") {
				return false
			}
		default:
			return false
		}
		// A value was read: close the containers it ends, then go on
		// to the next value or finish.
		for {
			if len(v.stack) == 0 {
				return true
			}
			v.space()
			if v.i >= len(v.b) {
				return false
			}
			object := v.stack[len(v.stack)-1]
			c := v.b[v.i]
			if c == ',' {
				v.i++
				v.space()
				if object && !v.key() {
					return false
				}
				break // the next value
			}
			if object && c != '}' || !object && c != ']' {
				return false
			}
			v.i++
			v.stack = v.stack[:len(v.stack)-1]
		}
	}
}

// key reads a member's name and its colon, and the space after them.
func (v *validator) key() bool {
	if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
		return false
	}
	v.space()
	if v.i >= len(v.b) || v.b[v.i] != ':' {
		return false
	}
	v.i++
	v.space()
	return true
}

// str reads a string whose opening quote is at v.i.
func (v *validator) str() bool {
	b := v.b
	i := v.i + 1
	for {
		for i < len(b) && !stringStop[b[i]] {
			i++
		}
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '"':
			v.i = i + 1
			return true
		case '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		default: // a control byte
			return false
		}
	}
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (v *validator) number() bool {
	b, i := v.b, v.i
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	v.i = i
	return true
}

func (v *validator) literal(lit string) bool {
	if len(v.b)-v.i < len(lit) || string(v.b[v.i:v.i+len(lit)]) != lit {
		return false
	}
	v.i += len(lit)
	return true
}
