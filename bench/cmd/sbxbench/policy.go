package main

import "github.com/sbxdb/sbxdb/workspace"

// allFiles is the capture and restore policy of every sbxdb figure: no
// default exclusions (node_modules among them), so that sbxdb stores the
// same files as every peer.
var allFiles = workspace.Policy{NoDefaultExclude: true}
