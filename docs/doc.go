// Package docs holds no code: its tests keep the documents under docs/, the
// README and the comments true to the repository. Every "SPEC §n" a comment
// or document cites must name a section of docs/SPEC.md (and "§10 Qn" a row
// of its decisions table), and every relative link or backquoted file path
// in the documents, and every repository file a Go comment names, must
// exist. They also keep two lines the architecture draws: chain and lease
// import neither bbolt nor the store's internals, and bucket and key names
// are spelt only in the two schema files.
package docs
