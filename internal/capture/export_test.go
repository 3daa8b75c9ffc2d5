package capture

import "os"

// Test-only access below the package's API, for the external test package.

// ForgeCachedStat gives the entry of path in the stat cache at cachePath
// (kept under the secrets whose fingerprint is secrets) the stat the file
// name in the open directory dir has now: what a write the stat does not
// show leaves behind. It reports false when the cache has no such entry.
func ForgeCachedStat(cachePath string, secrets [32]byte, path string, dir *os.File, name string) (bool, error) {
	st, _, err := lstatAt(dir, name)
	if err != nil {
		return false, err
	}
	cache := loadStatCache(cachePath, secrets)
	forged := false
	for i := range cache.entries {
		if cache.entries[i].path == path {
			cache.entries[i].st, forged = st, true
		}
	}
	if forged {
		cache.save(cachePath)
	}
	return forged, nil
}
