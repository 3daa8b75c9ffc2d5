package workload

// words is the vocabulary of identifiers, names and prose: lower-case ASCII
// words, none a keyword of Go, TypeScript or Python.
var words = []string{
	"account", "action", "adapter", "address", "agent", "alert", "alias", "amount", "anchor", "answer",
	"archive", "array", "asset", "attempt", "audit", "author", "backend", "backup", "badge", "balance",
	"batch", "binding", "block", "blob", "body", "bound", "branch", "bridge", "bucket", "buffer",
	"build", "bundle", "cache", "callback", "cancel", "capture", "cart", "catalog", "cell", "channel",
	"chapter", "charge", "chart", "check", "checkpoint", "child", "chunk", "cipher", "claim", "client",
	"clock", "cluster", "codec", "column", "command", "comment", "commit", "config", "conflict", "context",
	"contract", "cookie", "count", "counter", "credit", "cursor", "customer", "dataset", "deadline", "delta",
	"device", "digest", "dispatch", "document", "domain", "draft", "driver", "edge", "editor", "email",
	"embedding", "encoder", "endpoint", "engine", "entry", "event", "exporter", "factor", "feature", "feed",
	"field", "file", "filter", "flag", "folder", "format", "frame", "gateway", "graph", "group",
	"guard", "handle", "handler", "hash", "header", "health", "history", "host", "image", "index",
	"input", "invoice", "issue", "item", "job", "journal", "key", "label", "layer", "layout",
	"lease", "ledger", "level", "limit", "line", "link", "listener", "loader", "locale", "lock",
	"logger", "lookup", "manager", "manifest", "mapper", "marker", "match", "matrix", "member", "memory",
	"merge", "message", "meta", "method", "metric", "mirror", "mode", "model", "module", "monitor",
	"mutex", "name", "node", "notice", "number", "object", "offset", "option", "order", "origin",
	"output", "owner", "packet", "page", "panel", "parser", "partition", "patch", "path", "payload",
	"peer", "period", "permission", "pipeline", "pixel", "plan", "plugin", "point", "policy", "pool",
	"port", "position", "price", "prefix", "probe", "process", "product", "profile", "prompt", "provider",
	"proxy", "query", "queue", "quota", "reach", "rank", "rate", "reader", "reason", "receipt",
	"record", "region", "registry", "release", "reply", "report", "request", "resource", "response", "result",
	"retry", "revision", "role", "route", "router", "row", "rule", "runner", "sample", "schema",
	"scope", "score", "secret", "section", "segment", "sender", "sequence", "server", "service", "session",
	"setting", "shard", "signal", "signature", "sink", "size", "slice", "slot", "snapshot", "socket",
	"source", "span", "stage", "state", "status", "step", "storage", "store", "stream", "subject",
	"suffix", "summary", "table", "tag", "target", "task", "template", "tenant", "term", "thread",
	"ticket", "timeout", "timer", "token", "tool", "topic", "trace", "tracker", "transfer", "tree",
	"trigger", "unit", "update", "upload", "usage", "user", "value", "vector", "version", "view",
	"volume", "watcher", "widget", "window", "worker", "workspace", "writer", "zone",
}

// verbs start function names.
var verbs = []string{
	"get", "set", "load", "save", "parse", "build", "make", "create", "delete", "update",
	"fetch", "render", "encode", "decode", "validate", "check", "open", "close", "start", "stop",
	"run", "apply", "merge", "split", "format", "handle", "resolve", "compute", "find", "list",
	"read", "write", "send", "receive", "sync", "flush", "reset", "init", "register", "lookup",
	"normalize", "convert", "collect", "emit", "track", "schedule", "retry", "verify", "compare", "restore",
}
