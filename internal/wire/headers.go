package wire

// The header names of docs/API.md that sbxdb defines.
const (
	// HeaderMetadata carries a plain object's custom metadata, in a PUT
	// and in the answer to a GET or HEAD: a JSON object whose members are
	// the entries, names and values any strings, written in ASCII (every
	// other character escaped as \uXXXX), so that no header changes them.
	HeaderMetadata = "X-Sbxdb-Metadata"
	// HeaderMetaPrefix begins the header of each custom metadata entry a
	// PUT may send instead of HeaderMetadata (the encoding before it); the
	// rest of the header name is the entry's name, lower-cased (HTTP
	// header names ignore case). Answers carry HeaderMetadata only.
	HeaderMetaPrefix = "X-Sbxdb-Meta-"
	// HeaderUploaded carries a blob's or object's upload time, epoch ms.
	HeaderUploaded = "X-Sbxdb-Uploaded"
	// HeaderCode and HeaderMessage repeat a failed request's error code
	// and message (ErrorBody): the response to a HEAD has no body to
	// carry them, and a refusal may come before any handler knows its
	// route.
	HeaderCode    = "X-Sbxdb-Code"
	HeaderMessage = "X-Sbxdb-Message"
	// HeaderTestStore names the test store a request is served by (test
	// mode).
	HeaderTestStore = "X-Sbxdb-Test-Store"
	// HeaderNow sets the clock of the request's test store, in epoch
	// milliseconds, before the request is served (test mode).
	HeaderNow = "X-Sbxdb-Now"
)
