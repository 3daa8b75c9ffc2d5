package ui

import (
	"bytes"
	"encoding/json"
	"strings"
)

// message is a transcript message made readable: its role, its texts and
// its tool calls and results. Raw holds the message's JSON, indented,
// when no part of it was recognised.
type message struct {
	Role  string
	Texts []string
	Tools []toolPart
	Raw   string
}

// toolPart is a tool call (its name and arguments) or a tool's result.
type toolPart struct {
	Kind string // "call" or "result"
	Name string
	Body string
}

// messages makes each message of a conversation readable. It knows the
// shapes agents store: {role, content} with content a string or a list of
// parts ({type: "text", text}, tool calls and results in the OpenAI,
// Anthropic and TanStack AI spellings), parts, toolCalls / tool_calls.
func messages(conv []json.RawMessage) []message {
	out := make([]message, 0, len(conv))
	for _, raw := range conv {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			out = append(out, message{Role: "message", Raw: indent(raw)})
			continue
		}
		msg := message{Role: str(m["role"])}
		if msg.Role == "" {
			msg.Role = "message"
		}
		addParts(&msg, m["content"])
		addParts(&msg, m["parts"])
		for _, k := range []string{"toolCalls", "tool_calls"} {
			list, _ := m[k].([]any)
			for _, c := range list {
				addTool(&msg, c)
			}
		}
		if id := first(m, "toolCallId", "tool_call_id"); id != "" && msg.Role == "tool" {
			msg.Tools = append(msg.Tools, toolPart{Kind: "result", Name: id})
		}
		if len(msg.Texts) == 0 && len(msg.Tools) == 0 {
			msg.Raw = indent(raw)
		}
		out = append(out, msg)
	}
	return out
}

// addParts adds content: a string, or a list of parts.
func addParts(msg *message, content any) {
	switch c := content.(type) {
	case string:
		if c != "" {
			msg.Texts = append(msg.Texts, c)
		}
	case []any:
		for _, p := range c {
			part, ok := p.(map[string]any)
			if !ok {
				if s, ok := p.(string); ok {
					msg.Texts = append(msg.Texts, s)
				}
				continue
			}
			switch t := str(part["type"]); {
			case t == "text" || t == "reasoning" || t == "thinking":
				if s := first(part, "text", "content", "thinking"); s != "" {
					msg.Texts = append(msg.Texts, s)
				}
			case strings.Contains(t, "result"):
				msg.Tools = append(msg.Tools, toolPart{Kind: "result", Name: first(part, "toolName", "name", "tool_use_id", "toolCallId"),
					Body: body(part, "content", "output", "result")})
			case strings.Contains(t, "tool") || t == "function":
				addTool(msg, part)
			default:
				b, _ := json.Marshal(part)
				msg.Texts = append(msg.Texts, indent(b))
			}
		}
	}
}

// addTool adds a tool call: {name, input|args|arguments} or {function:
// {name, arguments}}.
func addTool(msg *message, c any) {
	call, ok := c.(map[string]any)
	if !ok {
		return
	}
	if f, ok := call["function"].(map[string]any); ok {
		call = f
	}
	msg.Tools = append(msg.Tools, toolPart{Kind: "call", Name: first(call, "name", "toolName"),
		Body: body(call, "arguments", "input", "args")})
}

// first is the first of m's keys holding a string.
func first(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s := str(m[k]); s != "" {
			return s
		}
	}
	return ""
}

// body is the first of m's keys present, as text: a string (indented when
// it holds JSON) or JSON indented.
func body(m map[string]any, keys ...string) string {
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		if s, ok := v.(string); ok {
			if json.Valid([]byte(s)) && strings.HasPrefix(strings.TrimSpace(s), "{") {
				return indent([]byte(s))
			}
			return s
		}
		b, _ := json.Marshal(v)
		return indent(b)
	}
	return ""
}

func str(v any) string { s, _ := v.(string); return s }

// indent is JSON b indented, or b as it is when it is not JSON.
func indent(b []byte) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return buf.String()
}
